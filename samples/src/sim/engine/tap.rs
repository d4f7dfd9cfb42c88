//! Taps: the mirror ports. Frames are only built into bytes here, when a tap records them, from what the
//! simulator's packet says they mean.

use std::io::Write;

use roce_wire::build::{IpSpec, RoceFrame, Vlan, emit_mac_control};
use roce_wire::ext::{AethKind, AethRepr, RethRepr};
use roce_wire::pfc::{MacControlRepr, PfcRepr};
use roce_wire::{BthRepr, ExtHeaders, Opcode};

use super::*;

static ZEROS: [u8; 4096] = [0; 4096];

impl<W: Write> World<'_, W> {
    /// Tap `tap` records `pkt`, which has just left a transmitter, stamped by its capture file's clock.
    pub(super) fn capture(&mut self, tap: usize, pkt: &Packet) {
        self.totals.captured_frames += 1;
        if pkt.kind != PacketKind::Pfc {
            self.trail_at_tap(tap, pkt);
        } else {
            self.tap_frames[tap] += 1;
        }
        let (file, iface) = self.tap_iface[tap];
        if self.caps.is_empty() {
            return;
        }
        let Some(n) = self.build_frame(pkt) else {
            return;
        };
        let cut = if self.snaplen > 0 {
            n.min(self.snaplen as usize)
        } else {
            n
        };
        let ts = self.sc.files[file].local_ns(self.now / PS_PER_NS);
        if let Some(cap) = self.caps.get_mut(file) {
            let data = self.frame_buf.get(..cut).unwrap_or(&[]);
            if let Err(e) = cap.write_packet(iface, ts, data, n as u32) {
                self.io_error = Some(e);
            }
        }
    }

    pub(super) fn roce_frame(&self, pkt: &Packet) -> Option<RoceFrame<'static>> {
        let f = self.flows.get(pkt.flow as usize)?;
        let dest_qp = if usize::from(pkt.dst) == f.src {
            f.requester_qp
        } else {
            f.responder_qp
        };
        let op = Opcode(pkt.opcode);
        let mut ext = ExtHeaders::default();
        let mut psn = f.psn(pkt.seq);
        let mut ack_req = false;
        match pkt.kind {
            PacketKind::Cnp => psn = 0,
            PacketKind::Ack | PacketKind::Nak => {
                ext.aeth = Some(AethRepr {
                    syndrome: pkt.syndrome,
                    msn: pkt.msn & 0x00ff_ffff,
                });
            }
            PacketKind::ReadReq => {
                let m = pkt.seq / f.pkts_per_msg;
                let k = pkt.seq % f.pkts_per_msg;
                let spec = self.sc.flows.get(pkt.flow as usize)?;
                let off = k * u64::from(spec.mtu);
                ext.reth = Some(RethRepr {
                    va: f.va + m * u64::from(spec.message_bytes) + off,
                    rkey: f.rkey,
                    dma_len: (u64::from(spec.message_bytes) - off) as u32,
                });
                ack_req = true;
            }
            PacketKind::Data => {
                if op == Opcode::RC_RDMA_WRITE_FIRST || op == Opcode::RC_RDMA_WRITE_ONLY {
                    let spec = self.sc.flows.get(pkt.flow as usize)?;
                    let m = pkt.seq / f.pkts_per_msg;
                    ext.reth = Some(RethRepr {
                        va: f.va + m * u64::from(spec.message_bytes),
                        rkey: f.rkey,
                        dma_len: spec.message_bytes,
                    });
                }
                if matches!(
                    op,
                    Opcode::RC_RDMA_READ_RESPONSE_FIRST
                        | Opcode::RC_RDMA_READ_RESPONSE_LAST
                        | Opcode::RC_RDMA_READ_RESPONSE_ONLY
                ) {
                    ext.aeth = Some(AethRepr {
                        syndrome: AethKind::Ack { credits: 31 }.syndrome(),
                        msn: pkt.msn & 0x00ff_ffff,
                    });
                }
                ack_req = matches!(
                    op,
                    Opcode::RC_RDMA_WRITE_LAST
                        | Opcode::RC_RDMA_WRITE_ONLY
                        | Opcode::RC_SEND_LAST
                        | Opcode::RC_SEND_ONLY
                );
            }
            PacketKind::Pfc => return None,
        }
        let payload = if pkt.kind == PacketKind::Cnp {
            &ZEROS[..16]
        } else {
            ZEROS.get(..pkt.payload as usize)?
        };
        let bth = if pkt.kind == PacketKind::Cnp {
            BthRepr::cnp(dest_qp)
        } else {
            BthRepr {
                ack_req,
                ..BthRepr::new(op, dest_qp, psn)
            }
        };
        let src = usize::from(pkt.src);
        let dst = usize::from(pkt.dst);
        Some(RoceFrame {
            src_mac: host_mac(src),
            dst_mac: host_mac(dst),
            vlan: Some(Vlan {
                pcp: pkt.prio & 7,
                dei: false,
                vid: self.sc.vlan,
            }),
            ip: IpSpec::V4 {
                src: host_ip(src),
                dst: host_ip(dst),
                dscp: self.dscp_of(pkt),
                ecn: pkt.ecn,
                ttl: 64,
                ident: pkt.ident,
            },
            sport: f.sport,
            bth,
            ext,
            payload,
        })
    }

    pub(super) fn dscp_of(&self, pkt: &Packet) -> u8 {
        if pkt.kind == PacketKind::Cnp {
            self.sc.hosts[usize::from(pkt.src)].cnp_dscp
        } else {
            self.sc.flows[pkt.flow as usize].dscp
        }
    }

    pub(super) fn build_frame(&mut self, pkt: &Packet) -> Option<usize> {
        if pkt.kind == PacketKind::Pfc {
            let mut quanta = [0u16; 8];
            for (i, q) in quanta.iter_mut().enumerate() {
                if pkt.pfc_mask & (1 << i) != 0 {
                    *q = pkt.pfc_quanta;
                }
            }
            let ctl = MacControlRepr::Pfc(PfcRepr {
                enable: u16::from(pkt.pfc_mask),
                quanta,
            });
            // A host's NIC pauses with its own MAC; a switch port with the port's.
            let port = usize::from(pkt.src);
            let node = self.ports.get(port).map_or(usize::MAX, |p| p.node);
            let mac = if node < self.sc.hosts.len() {
                host_mac(node)
            } else {
                port_mac(port)
            };
            return emit_mac_control(mac, None, &ctl, &mut self.frame_buf).ok();
        }
        let frame = self.roce_frame(pkt)?;
        frame.emit(&mut self.frame_buf).ok()
    }
}
