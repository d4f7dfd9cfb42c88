//! A sender faster than tcpreplay, for the capture benchmark: the Ethernet frames of a capture file sent
//! round and round through an AF_PACKET socket, `sendmmsg` in batches, bypassing the qdisc.
//!
//! `blast IFACE FILE COUNT [RATE]` sends COUNT frames (the file's frames in turn) on IFACE, at RATE frames
//! a second when given (paced per batch) or as fast as the socket takes them, then prints
//! `sent=N seconds=S`. tcpreplay writes a frame per system call and tops out below a million frames a
//! second here; a batch of 64 per call goes several times faster, which is what finding an engine's
//! loss-free limit needs.

use std::time::{Duration, Instant};

use roce_capture::{CaptureReader, LinkType};

const BATCH: usize = 64;

fn main() {
    if let Err(e) = run() {
        eprintln!("blast: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().collect();
    let [_, iface, file, count, rest @ ..] = args.as_slice() else {
        return Err("usage: blast IFACE FILE COUNT [RATE]".into());
    };
    let count: u64 = count.parse().map_err(|e| format!("COUNT: {e}"))?;
    let rate: Option<f64> = match rest.first() {
        Some(r) => Some(r.parse().map_err(|e| format!("RATE: {e}"))?),
        None => None,
    };
    let frames = load(file)?;
    if frames.is_empty() {
        return Err(format!("{file} has no Ethernet frames"));
    }
    let socket = Socket::open(iface)?;
    let started = Instant::now();
    let mut sent = 0u64;
    let mut next = 0usize;
    while sent < count {
        let n = BATCH.min((count - sent) as usize);
        let batch: Vec<&[u8]> = (0..n)
            .map(|i| frames[(next + i) % frames.len()].as_slice())
            .collect();
        let done = socket.send(&batch)?;
        sent += done as u64;
        next = (next + done) % frames.len();
        if let Some(rate) = rate {
            // Paced: never ahead of where RATE says the count should be.
            let due = Duration::from_secs_f64(sent as f64 / rate);
            while started.elapsed() < due {
                std::hint::spin_loop();
            }
        }
    }
    println!("sent={sent} seconds={:.6}", started.elapsed().as_secs_f64());
    Ok(())
}

fn load(path: &str) -> Result<Vec<Vec<u8>>, String> {
    let mut reader = CaptureReader::open(std::path::Path::new(path)).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    while let Some(rec) = reader.next_record().map_err(|e| e.to_string())? {
        if rec.link == LinkType::ETHERNET && rec.data.len() >= 14 {
            out.push(rec.data.to_vec());
        }
    }
    Ok(out)
}

struct Socket(i32);

impl Socket {
    fn open(iface: &str) -> Result<Socket, String> {
        let name = std::ffi::CString::new(iface).map_err(|e| e.to_string())?;
        // SAFETY: a C string that lives across the call.
        let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
        if index == 0 {
            return Err(format!("no interface {iface}"));
        }
        // Protocol 0: this socket only sends, so the kernel hands it nothing to read.
        // SAFETY: plain socket(2).
        let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, 0) };
        if fd < 0 {
            return Err(format!("socket: {}", std::io::Error::last_os_error()));
        }
        let socket = Socket(fd);
        let one: libc::c_int = 1;
        // SAFETY: an int option of the size given.
        unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_PACKET,
                libc::PACKET_QDISC_BYPASS,
                (&one as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        // SAFETY: an all-zero sockaddr_ll is valid; the fields that matter are set below.
        let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        addr.sll_family = libc::AF_PACKET as u16;
        addr.sll_ifindex = index as i32;
        // SAFETY: bind(2) with a sockaddr_ll of its own size.
        let rc = unsafe {
            libc::bind(
                fd,
                (&addr as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(format!(
                "bind to {iface}: {}",
                std::io::Error::last_os_error()
            ));
        }
        Ok(socket)
    }

    /// Sends what it can of `frames` in one call; a full queue (ENOBUFS) sends nothing this time.
    fn send(&self, frames: &[&[u8]]) -> Result<usize, String> {
        let mut iov: Vec<libc::iovec> = frames
            .iter()
            .map(|f| libc::iovec {
                iov_base: f.as_ptr() as *mut libc::c_void,
                iov_len: f.len(),
            })
            .collect();
        let mut msgs: Vec<libc::mmsghdr> = iov
            .iter_mut()
            .map(|v| {
                // SAFETY: an all-zero msghdr is a valid empty message; the iovec is set below.
                let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
                m.msg_hdr.msg_iov = v;
                m.msg_hdr.msg_iovlen = 1;
                m
            })
            .collect();
        // SAFETY: every message points at a live iovec over a live frame.
        let n = unsafe { libc::sendmmsg(self.0, msgs.as_mut_ptr(), msgs.len() as u32, 0) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::ENOBUFS) | Some(libc::EAGAIN) | Some(libc::EINTR) => Ok(0),
            _ => Err(format!("sendmmsg: {e}")),
        }
    }
}

impl Drop for Socket {
    fn drop(&mut self) {
        // SAFETY: the descriptor is ours and closed once.
        unsafe { libc::close(self.0) };
    }
}
