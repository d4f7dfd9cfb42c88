//! Many files as one capture: the merge equals `mergecap`'s, compressed files read as plain ones, damage in
//! one file costs only that file, windows select exactly, taps keep stable names.

use std::path::{Path, PathBuf};
use std::process::Command;

use roce_capture::inputs::resolve;
use roce_capture::write::{PcapWriter, PcapngWriter, SectionInfo};
use roce_capture::{Bound, Capture, LinkType, WindowError};

/// What a record says, for comparisons.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Rec {
    tap: u32,
    ts_ns: u64,
    len: u32,
    data: Vec<u8>,
}

fn packet(i: u64, len: usize) -> Vec<u8> {
    (0..len).map(|j| (i as usize * 7 + j) as u8).collect()
}

fn open(paths: &[PathBuf]) -> Capture {
    Capture::open(resolve(paths).unwrap()).unwrap()
}

fn read_all(c: &mut Capture) -> Vec<Rec> {
    let mut out = Vec::new();
    while let Some((_, r)) = c.next_record() {
        out.push(Rec {
            tap: r.iface,
            ts_ns: r.ts_ns,
            len: r.len,
            data: r.data.to_vec(),
        });
    }
    out
}

/// A pcap file of records at the given times (ns), packets numbered from `first`.
fn pcap(path: &Path, times: &[u64], first: u64) {
    let f = std::fs::File::create(path).unwrap();
    let mut w = PcapWriter::new(f, LinkType::ETHERNET, 65_535).unwrap();
    for (k, &t) in times.iter().enumerate() {
        let i = first + k as u64;
        w.write_packet(t, &packet(i, 60 + (i % 5) as usize), 1000)
            .unwrap();
    }
    w.into_inner().unwrap();
}

/// A pcapng file with two named interfaces; records alternate between them.
fn pcapng(path: &Path, names: [&str; 2], times: &[u64], first: u64) {
    let f = std::fs::File::create(path).unwrap();
    let mut w = PcapngWriter::new(f, &SectionInfo::application("merge test")).unwrap();
    for n in names {
        w.add_interface(LinkType::ETHERNET, 65_535, Some(n), None)
            .unwrap();
    }
    for (k, &t) in times.iter().enumerate() {
        let i = first + k as u64;
        w.write_packet((k % 2) as u32, t, &packet(i, 64), 1000)
            .unwrap();
    }
    w.into_inner().unwrap();
}

fn run(tool: &str, args: &[&str]) {
    let out = Command::new(tool)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {tool} ({e}): `cargo xtask install` installs it"));
    assert!(
        out.status.success(),
        "{tool} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Two hosts' captures that overlap in time, merged by us and by `mergecap`: the same records in the same
/// order, each file's interfaces their own taps.
#[test]
fn overlapping_files_merge_as_mergecap_does() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let a = d.join("a.pcapng");
    let b = d.join("b.pcap");
    // Interleaved in time, with a backwards step inside a (two interfaces of one file).
    pcapng(&a, ["eth0", "eth1"], &[100, 300, 250, 700, 900], 0);
    pcap(&b, &[200, 400, 800, 1000], 100);
    let merged = d.join("merged.pcapng");
    run("mergecap", &["-w", s(&merged), s(&a), s(&b)]);

    let mut ours = open(&[a.clone(), b.clone()]);
    let got = read_all(&mut ours);
    let mut want = Vec::new();
    testkit::frames::for_each_frame(&merged, |r| {
        want.push(Rec {
            tap: r.iface,
            ts_ns: r.ts_ns,
            len: r.len,
            data: r.data.to_vec(),
        })
    });
    assert_eq!(got.len(), 9);
    // mergecap numbers interfaces as we number taps: a's two, then b's.
    assert_eq!(got, want);
    let names: Vec<&str> = ours.taps().iter().map(|t| t.name.as_str()).collect();
    assert_eq!(
        names,
        [
            format!("{}:eth0", a.display()),
            format!("{}:eth1", a.display()),
            format!("{}:0", b.display())
        ]
    );
    let files: Vec<_> = ours.files().collect();
    assert_eq!(files[0].frames, 5);
    assert_eq!(files[1].frames, 4);
    assert_eq!(
        (files[1].first_ns, files[1].last_ns),
        (Some(200), Some(1000))
    );
    assert!(files.iter().all(|f| f.continues.is_none()));
}

/// A rotated set in three formats (pcap, gzip'd pcap, pcapng): the later files continue the first one's
/// tap, as `mergecap` merges identical interface lists, so a flow is not cut at the rotations.
#[test]
fn a_rotated_set_in_mixed_formats_is_one_tap() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let f0 = d.join("run.00000.pcap");
    let f1 = d.join("run.00001.pcap");
    let f2 = d.join("run.00002.pcapng");
    pcap(&f0, &[10, 20, 30], 0);
    pcap(&f1, &[40, 50], 3);
    run("gzip", &[s(&f1)]);
    let f1 = d.join("run.00001.pcap.gz");
    {
        let f = std::fs::File::create(&f2).unwrap();
        let mut w = PcapngWriter::new(f, &SectionInfo::application("t")).unwrap();
        // A name the pcap files cannot record does not break the set.
        w.add_interface(LinkType::ETHERNET, 65_535, Some("eth7"), None)
            .unwrap();
        w.write_packet(0, 60, &packet(5, 60), 1000).unwrap();
        w.into_inner().unwrap();
    }
    // Named in reverse: the order comes from the timestamps.
    let mut c = open(&[f2.clone(), f1.clone(), f0.clone()]);
    let got = read_all(&mut c);
    assert_eq!(
        got.iter().map(|r| r.ts_ns).collect::<Vec<_>>(),
        [10, 20, 30, 40, 50, 60]
    );
    assert!(got.iter().all(|r| r.tap == 0), "{got:?}");
    assert_eq!(c.taps().len(), 1);
    assert_eq!(c.taps()[0].name, format!("{}:0", f0.display()));
    let files: Vec<_> = c.files().collect();
    assert_eq!(files[1].compression.map(|c| c.name()), Some("gzip"));
    assert_eq!(files[0].continues, Some(1));
    assert_eq!(files[1].continues, Some(2));
    // The same set as a pattern the shell did not expand.
    let mut p = open(&[d.join("run.*")]);
    assert_eq!(read_all(&mut p), got);
}

/// Files one after the other whose interfaces differ (names both record, or link types) are separate taps.
#[test]
fn sequential_files_with_other_interfaces_are_other_taps() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let (a, b) = (d.join("a.pcapng"), d.join("b.pcapng"));
    pcapng(&a, ["eth0", "eth1"], &[1, 2], 0);
    pcapng(&b, ["eth0", "eth2"], &[5, 6], 0);
    let mut c = open(&[a, b]);
    let taps: Vec<u32> = read_all(&mut c).iter().map(|r| r.tap).collect();
    assert_eq!(taps, [0, 1, 2, 3]);
    assert!(c.files().all(|f| f.continues.is_none()));
}

/// gzip (also several members), zstd and lz4 read exactly as the plain file, through the real tools.
#[test]
fn compressed_files_read_as_the_plain_one() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let plain_pcap = d.join("p.pcap");
    pcap(
        &plain_pcap,
        &(0..2000).map(|i| i * 1000).collect::<Vec<_>>(),
        0,
    );
    let plain_ng = d.join("p.pcapng");
    pcapng(
        &plain_ng,
        ["x", "y"],
        &(0..2000).map(|i| i * 999).collect::<Vec<_>>(),
        0,
    );
    for plain in [&plain_pcap, &plain_ng] {
        let want = read_all(&mut open(std::slice::from_ref(plain)));
        for (tool, args, ext) in [
            ("gzip", &["-k", "-f"][..], "gz"),
            ("zstd", &["-q", "-f"][..], "zst"),
            ("lz4", &["-q", "-f"][..], "lz4"),
        ] {
            let mut a: Vec<&str> = args.to_vec();
            a.push(s(plain));
            if tool == "lz4" {
                let out = format!("{}.lz4", s(plain));
                a.push(Box::leak(out.into_boxed_str()));
            }
            run(tool, &a);
            let packed = PathBuf::from(format!("{}.{ext}", s(plain)));
            // A misleading name must not matter: content decides.
            let renamed = d.join(format!("misnamed-{ext}.bin"));
            std::fs::rename(&packed, &renamed).unwrap();
            let mut c = open(std::slice::from_ref(&renamed));
            assert_eq!(read_all(&mut c), want, "{tool} of {}", plain.display());
            let f = c.files().next().unwrap();
            assert_eq!(f.compression.map(|c| c.name()), Some(tool));
            assert!(f.error.is_none());
            // Progress counts the compressed bytes, to the file's size.
            let (done, total) = c.progress();
            assert_eq!(Some(done), total, "{tool}");
        }
    }
    // Two gzip members one after the other (pigz, appended logs) are one stream.
    let half = d.join("half.pcap");
    let bytes = std::fs::read(&plain_pcap).unwrap();
    std::fs::write(&half, &bytes[..5000]).unwrap();
    let rest = d.join("rest.bin");
    std::fs::write(&rest, &bytes[5000..]).unwrap();
    run("gzip", &["-f", s(&half), s(&rest)]);
    let mut joined = std::fs::read(d.join("half.pcap.gz")).unwrap();
    joined.extend(std::fs::read(d.join("rest.bin.gz")).unwrap());
    let multi = d.join("multi.gz");
    std::fs::write(&multi, joined).unwrap();
    assert_eq!(
        read_all(&mut open(&[multi])),
        read_all(&mut open(&[plain_pcap]))
    );
}

/// A corrupt second file: the first and third files' records all come through, the second's up to its
/// damage, and its summary names the damage.
#[test]
fn a_damaged_file_costs_only_itself() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let (a, b, c) = (d.join("a.pcap"), d.join("b.pcap"), d.join("c.pcap"));
    pcap(&a, &[1, 4, 7, 10], 0);
    pcap(&b, &[2, 5, 8, 11], 10);
    pcap(&c, &[3, 6, 9, 12], 20);
    // Cut b inside its third record.
    let bytes = std::fs::read(&b).unwrap();
    // Records 10 and 11 carry 60 and 61 bytes (see `pcap`): the third record starts after them.
    let third = 24 + (16 + 60) + (16 + 61);
    std::fs::write(&b, &bytes[..third + 20]).unwrap();
    let mut cap = open(&[a, b.clone(), c]);
    let got = read_all(&mut cap);
    let from = |tap: u32| got.iter().filter(|r| r.tap == tap).count();
    assert_eq!((from(0), from(1), from(2)), (4, 2, 4));
    let errors: Vec<String> = cap.errors().map(ToString::to_string).collect();
    assert_eq!(errors.len(), 1);
    assert!(errors[0].contains(s(&b)), "{errors:?}");
    assert!(errors[0].contains("truncated"), "{errors:?}");
    assert!(errors[0].contains(&format!("byte {third}")), "{errors:?}");

    // A file that is no capture at all, beside good ones, is an error of its own; alone it is fatal.
    let junk = d.join("junk.pcap");
    std::fs::write(&junk, b"this is not a capture").unwrap();
    let good = d.join("a.pcap");
    let mut cap = open(&[good, junk.clone()]);
    assert_eq!(read_all(&mut cap).len(), 4);
    assert_eq!(cap.errors().count(), 1);
    assert!(Capture::open(resolve(&[junk]).unwrap()).is_err());
}

/// Two pcap files in `d` of 50 records each, every 20 ns from `base`, the second's 5 ns after the first's:
/// a at base, base+20, ..., base+980; b at base+5, ..., base+985. Returns their paths and `base`.
fn interleaved(d: &Path) -> (PathBuf, PathBuf, u64) {
    let (a, b) = (d.join("a.pcap"), d.join("b.pcap"));
    let base = 1_700_000_000_000_000_000u64;
    pcap(&a, &(0..50).map(|i| base + i * 20).collect::<Vec<_>>(), 0);
    pcap(
        &b,
        &(0..50).map(|i| base + 5 + i * 20).collect::<Vec<_>>(),
        100,
    );
    (a, b, base)
}

/// `--from`/`--to` keep exactly the records in `[from, to)`, absolute or from the first record; numbers
/// stay those of the whole merged stream.
#[test]
fn windows_select_exactly_the_records_inside() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b, base) = interleaved(tmp.path());
    let all = read_all(&mut open(&[a.clone(), b.clone()]));
    for (from, to) in [
        (Some(Bound::After(100)), Some(Bound::After(300))),
        (Some(Bound::At(base + 105)), None),
        (None, Some(Bound::At(base + 5))),
        (Some(Bound::After(2000)), None),
    ] {
        let mut c = open(&[a.clone(), b.clone()]);
        c.set_window(from, to).unwrap();
        let (lo, hi) = c.window();
        let mut got = Vec::new();
        let mut numbers = Vec::new();
        while let Some((n, r)) = c.next_record() {
            got.push(r.ts_ns);
            numbers.push(n);
        }
        let want: Vec<u64> = all
            .iter()
            .map(|r| r.ts_ns)
            .filter(|&t| lo <= t && t < hi)
            .collect();
        assert_eq!(got, want, "{from:?}..{to:?}");
        // Numbers are positions in the whole stream.
        for (t, n) in got.iter().zip(&numbers) {
            assert_eq!(all[*n as usize - 1].ts_ns, *t);
        }
    }
}

/// A window that takes nothing from a capture with records is an error once the capture has been read,
/// worded for where it lies: beyond the capture, or in a stretch of it without records; one that cannot
/// hold anything is refused at once.
#[test]
fn a_window_that_takes_nothing_says_where_the_capture_is() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b, base) = interleaved(tmp.path());
    let read = |from, to| {
        let mut c = open(&[a.clone(), b.clone()]);
        c.set_window(from, to).unwrap();
        let n = read_all(&mut c).len();
        (n, c.check_window())
    };
    let past = read(Some(Bound::After(10_000_000_000)), None);
    assert_eq!(past.0, 0);
    assert_eq!(
        past.1.unwrap_err().to_string(),
        "the window --from +10s lies outside the capture, which spans +0s to +0.000000985s \
         (1700000000 to 1700000000.000000985 since the epoch)"
    );
    let before = read(None, Some(Bound::At(base - 1_500_000_000)));
    assert_eq!(
        before.1.unwrap_err().to_string(),
        "the window --to 1699999998.5 lies outside the capture, which spans 1700000000 to \
         1700000000.000000985 since the epoch (+0s to +0.000000985s)"
    );
    // Between b's record at +105 and a's at +120.
    let gap = read(Some(Bound::After(106)), Some(Bound::After(119)));
    assert_eq!(gap.0, 0);
    assert_eq!(
        gap.1.unwrap_err().to_string(),
        "no frame of the capture lies in the window --from +0.000000106s --to +0.000000119s; the \
         capture spans +0s to +0.000000985s (1700000000 to 1700000000.000000985 since the epoch)"
    );
    // One record inside is enough, and no window is never an error.
    assert_eq!(read(Some(Bound::After(980)), None), (2, Ok(())));
    assert_eq!(read(None, None), (100, Ok(())));

    // Not read to its end: nothing is known yet.
    let mut c = open(&[a.clone(), b.clone()]);
    c.set_window(Some(Bound::After(10_000)), None).unwrap();
    assert_eq!(c.check_window(), Ok(()));

    let mut c = open(std::slice::from_ref(&a));
    let err = c
        .set_window(Some(Bound::After(2_000)), Some(Bound::After(1_000)))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "the window --from +0.000002s --to +0.000001s is empty: it must end after it starts"
    );
    assert!(matches!(err, WindowError::Inverted { .. }));
}

/// Tap names do not depend on the order files are named in, only on the files.
#[test]
fn tap_names_are_stable() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let (a, b) = (d.join("a.pcapng"), d.join("b.pcapng"));
    pcapng(&a, ["eth0", "eth1"], &[1, 2, 3], 0);
    pcapng(&b, ["eth0", "eth1"], &[2, 3, 4], 0);
    let names = |paths: &[PathBuf]| {
        let mut c = open(paths);
        let recs = read_all(&mut c);
        let mut named: Vec<(u64, String)> = recs
            .iter()
            .map(|r| (r.ts_ns, c.taps()[r.tap as usize].name.clone()))
            .collect();
        named.sort();
        named
    };
    let ab = names(&[a.clone(), b.clone()]);
    assert_eq!(ab, names(&[b, a.clone()]));
    assert!(ab.contains(&(1, format!("{}:eth0", a.display()))));
    // Found in a directory: named relative to it, in the taps and the files' summaries.
    let mut c = open(&[d.to_path_buf()]);
    read_all(&mut c);
    let taps: Vec<&str> = c.taps().iter().map(|t| t.name.as_str()).collect();
    assert_eq!(
        taps,
        [
            "a.pcapng:eth0",
            "a.pcapng:eth1",
            "b.pcapng:eth0",
            "b.pcapng:eth1"
        ]
    );
    let files: Vec<&str> = c.files().map(|f| f.name.as_str()).collect();
    assert_eq!(files, ["a.pcapng", "b.pcapng"]);
}

/// Each tap keeps its own interface's `if_speed` across files, and every record carries its tap's.
#[test]
fn taps_keep_their_own_line_rates() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let write = |path: &Path, speeds: [Option<u64>; 2], times: &[u64]| {
        let f = std::fs::File::create(path).unwrap();
        let mut w = PcapngWriter::new(f, &SectionInfo::application("merge test")).unwrap();
        for (n, s) in ["eth0", "eth1"].into_iter().zip(speeds) {
            w.add_interface_with_speed(LinkType::ETHERNET, 65_535, Some(n), None, s)
                .unwrap();
        }
        for (k, &t) in times.iter().enumerate() {
            w.write_packet((k % 2) as u32, t, &packet(k as u64, 64), 64)
                .unwrap();
        }
        w.into_inner().unwrap();
    };
    let (a, b) = (d.join("a.pcapng"), d.join("b.pcapng"));
    write(
        &a,
        [Some(25_000_000_000), Some(100_000_000_000)],
        &[1, 3, 5, 7],
    );
    write(&b, [None, Some(400_000_000_000)], &[2, 4, 6, 8]);
    let mut c = open(&[a, b]);
    let mut seen = Vec::new();
    while let Some((_, r)) = c.next_record() {
        seen.push((r.iface, r.speed_bps));
    }
    let taps: Vec<Option<u64>> = c.taps().iter().map(|t| t.description.speed_bps).collect();
    assert_eq!(
        taps,
        [
            Some(25_000_000_000),
            Some(100_000_000_000),
            None,
            Some(400_000_000_000)
        ]
    );
    assert_eq!(seen.len(), 8);
    for (tap, speed) in seen {
        assert_eq!(speed, taps[tap as usize], "tap {tap}");
    }
}
