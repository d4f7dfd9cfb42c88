//! What the command line names, turned into the files to read: plain paths, `-` for standard input,
//! directories (every capture inside, by content), and patterns such as `run.*.pcapng` that the shell left
//! alone (quoted, or too many files for one command line).

use std::io::Read;
use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::read::Compression;

/// One input to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// A file by path.
    File(PathBuf),
    /// Standard input (`-`); at most one, since there is only one.
    Stdin,
}

impl Input {
    /// The name tables and tap names show: the path as given, or `-`.
    pub fn name(&self) -> String {
        match self {
            Input::File(p) => p.display().to_string(),
            Input::Stdin => "-".to_owned(),
        }
    }
}

/// The inputs of a command line, with what was passed over and why.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Inputs {
    /// The files to read, in command-line order (a directory's and a pattern's files in name order).
    pub files: Vec<Input>,
    /// Files of a directory that are not captures, with the reason, so the user can see they were not read.
    pub skipped: Vec<(PathBuf, String)>,
}

/// Why the inputs could not be resolved: nothing is read then, because a typo should not become a report
/// over the wrong files.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum InputError {
    /// A path that does not exist and is no pattern.
    #[error("{0}: no such file or directory")]
    NotFound(PathBuf),
    /// A pattern that matched nothing.
    #[error("{0}: the pattern matches no file")]
    NoMatch(String),
    /// A pattern that is not one.
    #[error("{pattern}: not a valid pattern: {reason}")]
    BadPattern {
        /// The pattern as given.
        pattern: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A directory that holds no capture.
    #[error("{0}: the directory holds no capture file")]
    EmptyDirectory(PathBuf),
    /// `-` given twice.
    #[error("standard input (-) can be read only once")]
    StdinTwice,
    /// No input at all.
    #[error("no capture to read")]
    Nothing,
    /// The file system failed (permissions, ...).
    #[error("{path}: {source}")]
    Io {
        /// What could not be listed or read.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

/// Resolves command-line arguments into the files to read.
pub fn resolve(args: &[PathBuf]) -> Result<Inputs, InputError> {
    let mut out = Inputs::default();
    for arg in args {
        if arg.as_os_str() == "-" {
            if out.files.contains(&Input::Stdin) {
                return Err(InputError::StdinTwice);
            }
            out.files.push(Input::Stdin);
        } else if arg.is_dir() {
            let before = out.files.len();
            directory(arg, &mut out)?;
            if out.files.len() == before {
                return Err(InputError::EmptyDirectory(arg.clone()));
            }
        } else if arg.exists() {
            out.files.push(Input::File(arg.clone()));
        } else if is_pattern(arg) {
            pattern(arg, &mut out)?;
        } else {
            return Err(InputError::NotFound(arg.clone()));
        }
    }
    if out.files.is_empty() {
        return Err(InputError::Nothing);
    }
    Ok(out)
}

fn is_pattern(p: &Path) -> bool {
    p.to_string_lossy().contains(['*', '?', '['])
}

fn pattern(p: &Path, out: &mut Inputs) -> Result<(), InputError> {
    let text = p.to_string_lossy().into_owned();
    let paths = glob::glob(&text).map_err(|e| InputError::BadPattern {
        pattern: text.clone(),
        reason: e.msg.to_owned(),
    })?;
    let mut found: Vec<PathBuf> = Vec::new();
    for entry in paths {
        let path = entry.map_err(|e| InputError::Io {
            path: e.path().to_path_buf(),
            source: e.into(),
        })?;
        if path.is_file() {
            found.push(path);
        }
    }
    if found.is_empty() {
        return Err(InputError::NoMatch(text));
    }
    found.sort();
    out.files.extend(found.into_iter().map(Input::File));
    Ok(())
}

/// Every capture directly inside `dir`, recognised by its first bytes, in name order.
fn directory(dir: &Path, out: &mut Inputs) -> Result<(), InputError> {
    let io_err = |source| InputError::Io {
        path: dir.to_path_buf(),
        source,
    };
    let mut names: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(io_err)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    names.sort();
    for path in names {
        match looks_like_capture(&path) {
            Ok(()) => out.files.push(Input::File(path)),
            Err(why) => out.skipped.push((path, why)),
        }
    }
    Ok(())
}

/// Whether a file starts like a capture (or a compressed one); the reason when not.
fn looks_like_capture(path: &Path) -> Result<(), String> {
    let mut head = [0u8; 4];
    let mut file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let mut got = 0;
    while got < head.len() {
        match file.read(&mut head[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.to_string()),
        }
    }
    if got < 4 {
        return Err("shorter than a capture header".to_owned());
    }
    let magic = u32::from_le_bytes(head);
    let capture = matches!(
        magic,
        0xa1b2_c3d4 | 0xd4c3_b2a1 | 0xa1b2_3c4d | 0x4d3c_b2a1 | 0x0A0D_0D0A
    );
    if capture || Compression::detect(&head).is_some() {
        Ok(())
    } else {
        Err("not a pcap, pcapng or compressed file".to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, bytes).unwrap();
        p
    }

    #[test]
    fn files_directories_patterns_and_stdin() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        let pcap = 0xa1b2_c3d4u32.to_le_bytes();
        let a = write(d, "run.00001.pcap", &pcap);
        let b = write(d, "run.00000.pcap", &pcap);
        let gz = write(d, "z.pcap.gz", &[0x1f, 0x8b, 8, 0]);
        let txt = write(d, "notes.txt", b"hello");
        let inputs = resolve(&[d.to_path_buf()]).unwrap();
        assert_eq!(
            inputs.files,
            [
                Input::File(b.clone()),
                Input::File(a.clone()),
                Input::File(gz)
            ]
        );
        assert_eq!(inputs.skipped.len(), 1);
        assert_eq!(inputs.skipped[0].0, txt);

        let pattern = d.join("run.*.pcap");
        let inputs = resolve(&[pattern, PathBuf::from("-")]).unwrap();
        assert_eq!(inputs.files, [Input::File(b), Input::File(a), Input::Stdin]);
    }

    #[test]
    fn what_cannot_be_read_is_an_error_before_anything_is_read() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        assert!(matches!(
            resolve(&[d.join("missing.pcap")]),
            Err(InputError::NotFound(_))
        ));
        assert!(matches!(
            resolve(&[d.join("*.pcapng")]),
            Err(InputError::NoMatch(_))
        ));
        assert!(matches!(
            resolve(&[d.to_path_buf()]),
            Err(InputError::EmptyDirectory(_))
        ));
        assert!(matches!(
            resolve(&[PathBuf::from("-"), PathBuf::from("-")]),
            Err(InputError::StdinTwice)
        ));
        assert!(matches!(resolve(&[]), Err(InputError::Nothing)));
    }
}
