//! The report's own files in its directory. A report written where an earlier one was must replace it
//! whole: a chart the new capture does not make must not stay beside the new page as if it belonged to it,
//! and nothing else the user keeps in the directory may be touched.
//!
//! [`MANIFEST`] lists, one name a line, every file a report writes into the directory, each added before
//! the file is written, so that a report that fails half-way still leaves a list that covers what it
//! wrote. A new report first removes the files its predecessor listed ([`start`]), then lists its own, and
//! puts the list in order at the end ([`finish`]).
//! Each addition opens the list for appending: the report's writers run on several threads, and a line
//! appended is one small write.

use std::io::Write;
use std::path::Path;

use super::ReportError;
use crate::output::tables;

/// The list's name in the report's directory.
pub const MANIFEST: &str = ".roce-report";

const HEADER: &str = "# Written by roce-analyzer report: the files it wrote in this directory, one a line. The \
                      next report written here removes them first.\n";

/// Makes `dir` ready for a report: created if missing, the files an earlier report listed there removed
/// (plain file names only, and only regular files: a name a user has since turned into a directory stays),
/// and a new, empty list started.
pub fn start(dir: &Path) -> Result<(), ReportError> {
    tables::create_dir(dir)?;
    let path = dir.join(MANIFEST);
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ReportError::Io { path, source }
    };
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            for name in text.lines().filter(|l| is_file_name(l)) {
                let file = dir.join(name);
                let regular = std::fs::symlink_metadata(&file).is_ok_and(|m| m.is_file());
                if regular {
                    std::fs::remove_file(&file).map_err(io(&file))?;
                }
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(&path)(e)),
    }
    std::fs::write(&path, HEADER).map_err(io(&path))
}

/// Adds `name`, a file about to be written into `dir`, to the list [`start`] began there.
pub fn add(dir: &Path, name: &str) -> Result<(), ReportError> {
    let path = dir.join(MANIFEST);
    let io = |source| ReportError::Io {
        path: path.clone(),
        source,
    };
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .map_err(io)?;
    file.write_all(format!("{name}\n").as_bytes()).map_err(io)
}

/// Puts the list in name order once the report is written: its writers' threads appended in whatever
/// order they ran, and the same capture must give the same files, byte for byte. Rewritten beside and
/// renamed over, so that the list is whole at every moment.
pub fn finish(dir: &Path) -> Result<(), ReportError> {
    let path = dir.join(MANIFEST);
    let next = dir.join(format!("{MANIFEST}.next"));
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ReportError::Io { path, source }
    };
    let text = std::fs::read_to_string(&path).map_err(io(&path))?;
    let mut names: Vec<&str> = text.lines().filter(|l| is_file_name(l)).collect();
    names.sort_unstable();
    names.dedup();
    let mut sorted = HEADER.to_owned();
    for name in names {
        sorted.push_str(name);
        sorted.push('\n');
    }
    std::fs::write(&next, sorted).map_err(io(&next))?;
    std::fs::rename(&next, &path).map_err(io(&path))
}

/// Whether a line of the list names a file directly inside the directory: never a path that leads out of
/// it, nor the list itself, whatever the file was edited to say.
fn is_file_name(line: &str) -> bool {
    !line.is_empty()
        && !line.starts_with('#')
        && line != "."
        && line != ".."
        && line != MANIFEST
        && !line.contains(['/', '\\', '\0'])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only the files the list names go, and only when they lie directly in the directory.
    #[test]
    fn the_list_removes_what_it_names_and_nothing_else() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("out");
        std::fs::create_dir(&out).unwrap();
        let outside = tmp.path().join("outside.png");
        for f in ["flow_01.png", "mine.png", "index.html"] {
            std::fs::write(out.join(f), "x").unwrap();
        }
        std::fs::write(&outside, "x").unwrap();
        std::fs::create_dir(out.join("made_a_dir.png")).unwrap();
        std::fs::write(
            out.join(MANIFEST),
            "# header\nflow_01.png\nindex.html\n../outside.png\nmade_a_dir.png\n.\n\ngone.png\n",
        )
        .unwrap();
        start(&out).unwrap();
        let mut left: Vec<String> = std::fs::read_dir(&out)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, [MANIFEST, "made_a_dir.png", "mine.png"]);
        assert!(outside.exists());
        assert_eq!(std::fs::read_to_string(out.join(MANIFEST)).unwrap(), HEADER);
        for name in ["flows.csv", "cnp_rate.png", "flows.csv"] {
            add(&out, name).unwrap();
        }
        finish(&out).unwrap();
        assert_eq!(
            std::fs::read_to_string(out.join(MANIFEST)).unwrap(),
            format!("{HEADER}cnp_rate.png\nflows.csv\n")
        );
    }
}
