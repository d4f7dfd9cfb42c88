//! The row batches the decoding thread fills: plain column buffers of one page's rows, handed whole to the
//! encoding thread and handed back empty to be filled again.

use roce_core::decode::{Frame, IpInfo, Kind};
use roce_wire::bth::BthRepr;
use roce_wire::ext::{AethRepr, RethRepr};
use roce_wire::pfc::MacControlRepr;

/// Rows per data page, which is also the batch the decoding thread hands over: large enough that a page's
/// header and the hand-over cost nothing per row, small enough that the buffers in flight stay near 10 MB.
pub const PAGE_ROWS: usize = 1 << 16;

/// Declares the column buffers once: the struct, and [`Rows::each_buffer`] over every field of it, so that
/// clearing and reserving cannot forget a column.
macro_rules! rows {
    ($($name:ident: $ty:ty,)*) => {
        /// The column buffers of one page's rows: raw values, looked up in the dictionaries (addresses, tap
        /// names) only on the encoding thread, so a row costs the decoding thread a handful of stores.
        #[derive(Debug, Default)]
        pub(super) struct Rows {
            $(pub(super) $name: $ty,)*
        }

        impl Rows {
            fn each_buffer(&mut self, each: &mut dyn FnMut(&mut dyn Buffer)) {
                $(each(&mut self.$name);)*
            }
        }
    };
}

rows! {
    frame: Vec<i64>,
    time_ns: Vec<i64>,
    iface: Vec<u32>,
    kind: Vec<Kind>,
    len: Vec<u32>,
    caplen: Vec<u32>,
    vlan: Vec<Option<u16>>,
    pcp: Vec<Option<u8>>,
    inner_vlan: Vec<Option<u16>>,
    src_mac: Vec<Option<[u8; 6]>>,
    dst_mac: Vec<Option<[u8; 6]>>,
    ip: Vec<Option<IpInfo>>,
    roce_version: Vec<Option<u8>>,
    sport: Vec<Option<u16>>,
    bth: Vec<Option<BthRepr>>,
    payload_len: Vec<Option<i32>>,
    icrc_ok: Vec<Option<bool>>,
    aeth: Sparse<AethRepr>,
    reth: Sparse<RethRepr>,
    deth_src_qp: Sparse<u32>,
    mac_control: Sparse<MacControlRepr>,
}

/// A header that few frames carry (AETH on acknowledgements, RETH on a message's first packet, DETH,
/// PFC and PAUSE): its values with their rows, so that the other rows cost neither a store nor room in
/// the batch (as `Option`s these four took a third of a row's bytes).
#[derive(Debug)]
pub(super) struct Sparse<T> {
    pub(super) rows: Vec<u32>,
    pub(super) values: Vec<T>,
}

impl<T> Default for Sparse<T> {
    fn default() -> Self {
        Sparse {
            rows: Vec::new(),
            values: Vec::new(),
        }
    }
}

impl<T> Sparse<T> {
    #[inline]
    fn push(&mut self, row: usize, value: Option<T>) {
        if let Some(v) = value {
            self.rows.push(row as u32);
            self.values.push(v);
        }
    }
}

impl<T> Buffer for Sparse<T> {
    fn clear_keep(&mut self) {
        self.rows.clear();
        self.values.clear();
    }
    fn reserve_rows(&mut self, _: usize) {}
}

impl Rows {
    pub(super) fn with_capacity(n: usize) -> Self {
        let mut r = Rows::default();
        r.reserve(n);
        r
    }

    /// Appends one frame; the fields a frame lacks are null, as `decode --json` leaves them out. Headers
    /// are copied whole (a BTH, the IP facts, a PFC frame's content) and split into columns on the encoding
    /// thread: fewer stores here, on the thread that also reads and decodes.
    pub(super) fn push(&mut self, f: &Frame<'_>) {
        let row = self.frame.len();
        self.frame.push(f.number as i64);
        self.time_ns.push(f.ts_ns as i64);
        self.iface.push(f.iface);
        self.kind.push(f.kind);
        self.len.push(f.len);
        self.caplen.push(f.caplen);
        self.vlan.push(f.vlan);
        self.pcp.push(f.pcp);
        self.inner_vlan.push(f.inner_vlan);
        self.src_mac.push(f.src_mac);
        self.dst_mac.push(f.dst_mac);
        self.ip.push(f.ip);
        let roce = f.roce.as_ref();
        self.roce_version.push(roce.map(|r| r.version));
        self.sport.push(roce.and_then(|r| r.sport));
        self.bth.push(roce.and_then(|r| r.packet.bth));
        self.payload_len.push(
            roce.and_then(|r| r.packet.payload_len)
                .map(|n| i32::try_from(n).unwrap_or(i32::MAX)),
        );
        self.icrc_ok.push(roce.and_then(|r| r.icrc.as_option()));
        if let Some(e) = roce.map(|r| &r.packet.ext) {
            self.aeth.push(row, e.aeth);
            self.reth.push(row, e.reth);
            self.deth_src_qp.push(row, e.deth.map(|d| d.src_qp));
        }
        self.mac_control.push(row, f.mac_control);
    }

    pub(super) fn len(&self) -> usize {
        self.frame.len()
    }

    pub(super) fn clear(&mut self) {
        self.each_buffer(&mut |b| b.clear_keep());
    }

    fn reserve(&mut self, n: usize) {
        self.each_buffer(&mut |b| b.reserve_rows(n));
    }
}

/// What [`Rows::each_buffer`] needs of a column buffer, whatever its element type.
trait Buffer {
    fn clear_keep(&mut self);
    fn reserve_rows(&mut self, n: usize);
}

impl<T> Buffer for Vec<T> {
    fn clear_keep(&mut self) {
        self.clear();
    }
    fn reserve_rows(&mut self, n: usize) {
        self.reserve(n.saturating_sub(self.len()));
    }
}
