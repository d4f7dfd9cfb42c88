//! The dataset's columns: their names and Parquet types in the documented order (docs/spark.md), and the
//! version that changes with them.

use polars::prelude::PlSmallStr;
use polars_parquet::parquet::error::ParquetError;
use polars_parquet::parquet::metadata::SchemaDescriptor;
use polars_parquet::parquet::schema::Repetition;
use polars_parquet::parquet::schema::types::{
    IntegerType, ParquetType, PhysicalType, PrimitiveConvertedType, PrimitiveLogicalType,
};

/// The dataset's schema version: bumped whenever a column is added, removed, renamed or changes meaning.
pub const SCHEMA_VERSION: i32 = 1;
/// The file metadata key that holds [`SCHEMA_VERSION`].
pub const SCHEMA_VERSION_KEY: &str = "rocetrace.schema_version";

/// A column's Parquet type, declared as polars' own writer declared it, so that readers see the same schema
/// whichever rocetrace version wrote a dataset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Type {
    Int32,
    Int64,
    UInt64,
    Bool,
    Text,
}

/// Every column, in the documented order (docs/spark.md). The encoder fills them in this order.
pub(super) const COLUMNS: &[(&str, Type)] = &[
    ("schema_version", Type::Int32),
    ("frame", Type::Int64),
    ("time_ns", Type::Int64),
    ("tap", Type::Text),
    ("kind", Type::Text),
    ("len", Type::Int64),
    ("caplen", Type::Int64),
    ("src_mac", Type::Text),
    ("dst_mac", Type::Text),
    ("vlan", Type::Int32),
    ("pcp", Type::Int32),
    ("inner_vlan", Type::Int32),
    ("src", Type::Text),
    ("dst", Type::Text),
    ("dscp", Type::Int32),
    ("ecn", Type::Int32),
    ("ip_len", Type::Int32),
    ("roce_version", Type::Int32),
    ("sport", Type::Int32),
    ("opcode", Type::Int32),
    ("dest_qp", Type::Int32),
    ("psn", Type::Int32),
    ("se", Type::Bool),
    ("migreq", Type::Bool),
    ("pad", Type::Int32),
    ("tver", Type::Int32),
    ("pkey", Type::Int32),
    ("fecn", Type::Bool),
    ("becn", Type::Bool),
    ("ack_req", Type::Bool),
    ("payload_len", Type::Int32),
    ("icrc_ok", Type::Bool),
    ("aeth_syndrome", Type::Int32),
    ("aeth_msn", Type::Int32),
    ("reth_va", Type::UInt64),
    ("reth_rkey", Type::Int64),
    ("reth_len", Type::Int64),
    ("deth_src_qp", Type::Int32),
    ("pfc_enable", Type::Int32),
    ("pfc_quanta_0", Type::Int32),
    ("pfc_quanta_1", Type::Int32),
    ("pfc_quanta_2", Type::Int32),
    ("pfc_quanta_3", Type::Int32),
    ("pfc_quanta_4", Type::Int32),
    ("pfc_quanta_5", Type::Int32),
    ("pfc_quanta_6", Type::Int32),
    ("pfc_quanta_7", Type::Int32),
    ("pause_quanta", Type::Int32),
];

pub(super) fn schema() -> Result<SchemaDescriptor, ParquetError> {
    let fields = COLUMNS
        .iter()
        .map(|&(name, t)| {
            let (physical, converted, logical) = match t {
                Type::Int32 => (PhysicalType::Int32, None, None),
                Type::Int64 => (PhysicalType::Int64, None, None),
                Type::UInt64 => (
                    PhysicalType::Int64,
                    Some(PrimitiveConvertedType::Uint64),
                    Some(PrimitiveLogicalType::Integer(IntegerType::UInt64)),
                ),
                Type::Bool => (PhysicalType::Boolean, None, None),
                Type::Text => (
                    PhysicalType::ByteArray,
                    Some(PrimitiveConvertedType::Utf8),
                    Some(PrimitiveLogicalType::String),
                ),
            };
            ParquetType::try_from_primitive(
                PlSmallStr::from_static(name),
                physical,
                Repetition::Optional,
                converted,
                logical,
                None,
            )
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(SchemaDescriptor::new(
        PlSmallStr::from_static("root"),
        fields,
    ))
}
