//! The names: for each vendor and [`Meaning`], the raw counter names its drivers use, taken from the drivers'
//! published sources (Linux `drivers/infiniband/hw/{mlx5,bnxt_re,irdma,ionic}` and the Ethernet drivers'
//! ethtool string tables `mlx5/core/en_stats.c`, `bnxt_ethtool.c`, `ice_ethtool.c`, `ionic_stats.c`) and, for
//! ionic's RDMA counters, which its firmware names, from AMD's published tools that read them. Only the names
//! are taken, as facts; `docs/nic-counters.md` says the same in a table, with what each vendor lacks.
//!
//! A vendor's names in one list are alternatives, newest first: bnxt_re renamed its counters twice (Linux
//! 6.x `tx_cnp_pkts`, then `np_cnp_pkts`, and Broadcom's own driver `np_cnp_sent`), and a capture may come from
//! any of them.

use super::{Meaning, Place, Source, Vendor};

/// One source that counts per priority, or (`all`) all priorities together.
const fn s(
    vendor: Vendor,
    meaning: Meaning,
    place: Place,
    names: &'static [&'static str],
) -> Source {
    Source {
        vendor,
        meaning,
        place,
        names,
        sum: false,
        all_priorities: false,
        xoff_only: false,
    }
}

use Meaning as M;
use Place::{Ethtool as E, HwCounters as H};
use Vendor::{BnxtRe, Ionic, Irdma, Mlx5};

/// Every (vendor, meaning) that is counted. A pair missing here is a meaning the vendor does not count.
pub const SOURCES: &[Source] = &[
    // NVIDIA ConnectX: mlx5_ib's hw_counters (counters.c), mlx5_core's ethtool statistics (en_stats.c).
    s(Mlx5, M::CnpSent, H, &["np_cnp_sent"]),
    s(Mlx5, M::CnpHandled, H, &["rp_cnp_handled"]),
    s(
        Mlx5,
        M::EcnMarkedReceived,
        H,
        &["np_ecn_marked_roce_packets"],
    ),
    s(Mlx5, M::OutOfSequence, H, &["out_of_sequence"]),
    s(Mlx5, M::SeqErrNaksReceived, H, &["packet_seq_err"]),
    s(Mlx5, M::LocalAckTimeouts, H, &["local_ack_timeout_err"]),
    s(Mlx5, M::PauseFramesRx, E, &["rx_prio{p}_pause"]),
    s(Mlx5, M::PauseFramesTx, E, &["tx_prio{p}_pause"]),
    s(Mlx5, M::PauseDurationRx, E, &["rx_prio{p}_pause_duration"]),
    s(Mlx5, M::PauseDurationTx, E, &["tx_prio{p}_pause_duration"]),
    s(Mlx5, M::RxDiscards, E, &["rx_discards_phy"]),
    s(Mlx5, M::TxDiscards, E, &["tx_discards_phy"]),
    // Broadcom: bnxt_re's hw_counters (hw_counters.c, three generations of names), bnxt_en's ethtool
    // statistics (bnxt_ethtool.c).
    s(
        BnxtRe,
        M::CnpSent,
        H,
        &["np_cnp_sent", "np_cnp_pkts", "tx_cnp_pkts"],
    ),
    s(BnxtRe, M::CnpHandled, H, &["rp_cnp_handled", "rx_cnp_pkts"]),
    s(
        BnxtRe,
        M::EcnMarkedReceived,
        H,
        &["np_ecn_marked_roce_packets", "rx_ecn_marked_pkts"],
    ),
    s(
        BnxtRe,
        M::OutOfSequence,
        H,
        &["out_of_sequence", "oos_drop_count"],
    ),
    s(
        BnxtRe,
        M::SeqErrNaksReceived,
        H,
        &["packet_seq_err", "seq_err_naks_rcvd"],
    ),
    s(
        BnxtRe,
        M::LocalAckTimeouts,
        H,
        &["local_ack_timeout_err", "to_retransmits"],
    ),
    s(BnxtRe, M::PauseFramesRx, E, &["rx_pfc_ena_frames_pri{p}"]),
    s(BnxtRe, M::PauseFramesTx, E, &["tx_pfc_ena_frames_pri{p}"]),
    s(
        BnxtRe,
        M::PauseDurationRx,
        E,
        &["pfc_pri{p}_rx_duration_us"],
    ),
    s(
        BnxtRe,
        M::PauseDurationTx,
        E,
        &["pfc_pri{p}_tx_duration_us"],
    ),
    s(BnxtRe, M::RxDiscards, H, &["rx_roce_discards"]),
    s(BnxtRe, M::TxDiscards, H, &["tx_roce_discards"]),
    // Intel: irdma's hw_counters (verbs.c; the gen3 names only on its newest parts), ice's ethtool
    // statistics (ice_ethtool.c, and the `port.` names of its first releases).
    s(Irdma, M::CnpSent, H, &["cnpSent"]),
    s(Irdma, M::CnpHandled, H, &["cnpHandled"]),
    s(Irdma, M::EcnMarkedReceived, H, &["RxECNMrkd"]),
    s(Irdma, M::OutOfSequence, H, &["Rcvd Out of order packets"]),
    s(Irdma, M::LocalAckTimeouts, H, &["RTO"]),
    Source {
        xoff_only: true,
        ..s(
            Irdma,
            M::PauseFramesRx,
            E,
            &["rx_priority_{p}_xoff.nic", "port.rx-priority-{p}-xoff"],
        )
    },
    Source {
        xoff_only: true,
        ..s(
            Irdma,
            M::PauseFramesTx,
            E,
            &["tx_priority_{p}_xoff.nic", "port.tx-priority-{p}-xoff"],
        )
    },
    Source {
        sum: true,
        ..s(Irdma, M::RxDiscards, H, &["ip4InDiscards", "ip6InDiscards"])
    },
    // AMD Pensando: ionic's hw_counters are named by its firmware; its ethtool statistics (ionic_stats.c)
    // count pause frames over all priorities together and pause time per priority.
    s(Ionic, M::CnpSent, H, &["tx_rdma_cnp_pkts"]),
    s(Ionic, M::CnpHandled, H, &["rx_rdma_cnp_pkts"]),
    s(Ionic, M::EcnMarkedReceived, H, &["rx_rdma_ecn_pkts"]),
    s(Ionic, M::OutOfSequence, H, &["resp_rx_outouf_seq"]),
    s(Ionic, M::SeqErrNaksReceived, H, &["req_rx_pkt_seq_err"]),
    s(Ionic, M::LocalAckTimeouts, H, &["tx_rdma_ack_timeout"]),
    s(Ionic, M::RetransmittedPackets, H, &["tx_rdma_retx_pkts"]),
    Source {
        all_priorities: true,
        ..s(Ionic, M::PauseFramesRx, E, &["frames_rx_pripause"])
    },
    Source {
        all_priorities: true,
        ..s(Ionic, M::PauseFramesTx, E, &["frames_tx_pripause"])
    },
    s(Ionic, M::PauseDurationRx, E, &["rx_pripause_{p}_1us_count"]),
    s(Ionic, M::PauseDurationTx, E, &["tx_pripause_{p}_1us_count"]),
    s(Ionic, M::RxDiscards, E, &["frames_rx_dropped"]),
    s(Ionic, M::TxDiscards, E, &["hw_tx_dropped"]),
];

/// hw_counters names only one vendor uses, which tell a device's vendor when neither its driver nor its
/// name does. mlx5's names are not here: bnxt_re's newest drivers use them too, so a device is mlx5 by its
/// names only when it has none of the others' ([`Vendor::of_counter_names`]).
pub const SIGNATURES: &[(Vendor, &str)] = &[
    (BnxtRe, "tx_cnp_pkts"),
    (BnxtRe, "rx_cnp_pkts"),
    (BnxtRe, "np_cnp_pkts"),
    (BnxtRe, "rx_ecn_marked_pkts"),
    (BnxtRe, "oos_drop_count"),
    (BnxtRe, "to_retransmits"),
    (BnxtRe, "seq_err_naks_rcvd"),
    (BnxtRe, "rx_roce_discards"),
    (BnxtRe, "tx_roce_discards"),
    (BnxtRe, "active_qps"),
    (BnxtRe, "recoverable_errors"),
    (Irdma, "cnpSent"),
    (Irdma, "cnpHandled"),
    (Irdma, "cnpIgnored"),
    (Irdma, "RxECNMrkd"),
    (Irdma, "ip4InDiscards"),
    (Irdma, "InRdmaWrites"),
    (Irdma, "iwInRdmaWrites"),
    (Ionic, "tx_rdma_cnp_pkts"),
    (Ionic, "rx_rdma_cnp_pkts"),
    (Ionic, "rx_rdma_ecn_pkts"),
    (Ionic, "rx_rdma_ucast_pkts"),
    (Ionic, "req_rx_pkt_seq_err"),
    (Ionic, "tx_rdma_ack_timeout"),
];

/// hw_counters names of mlx5 (and of bnxt_re's newest drivers), which make a device mlx5 by its names when
/// no other vendor's are there.
pub const MLX5_NAMES: &[&str] = &[
    "np_cnp_sent",
    "rp_cnp_handled",
    "np_ecn_marked_roce_packets",
    "out_of_sequence",
    "packet_seq_err",
    "local_ack_timeout_err",
    "rx_dct_connect",
];
