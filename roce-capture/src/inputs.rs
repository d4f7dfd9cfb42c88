//! What the command line names, turned into the files to read: plain paths, `-` for standard input,
//! directories (every capture inside, by content), and patterns such as `run.*.pcapng` that the shell left
//! alone (quoted, or too many files for one command line).
//!
//! **Each file once.** A file named twice (the same path again, `./x` beside `x`, a symlink to it, a pattern
//! that overlaps another input) would count every frame twice and look like a mirrored tap. Files are known
//! by what they are on disk (device and inode), the first naming is read and the others are listed in
//! [`Inputs::repeats`] so the user can be told.
//!
//! **Names.** A file's rows and taps carry the path as the user typed it; a file found inside a directory
//! or by a pattern is named relative to the directory typed (or the pattern's fixed leading directories),
//! so that `stats /data/run42/` gives `host-a.pcapng:eth0` rather than the whole path on every row. Where
//! two files would get one name, both keep the path they were found at.

use std::collections::HashMap;
use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::read::Compression;

/// One input to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// A file.
    File {
        /// Where to open it.
        path: PathBuf,
        /// What its rows and taps are called (see the module documentation).
        name: String,
    },
    /// Standard input (`-`); at most one, since there is only one.
    Stdin,
}

impl Input {
    /// A file named by its path, as a caller that names one file directly gives it.
    pub fn file(path: impl Into<PathBuf>) -> Input {
        let path = path.into();
        Input::File {
            name: path.display().to_string(),
            path,
        }
    }

    /// The name tables and tap names show: the file's name, or `-`.
    pub fn name(&self) -> String {
        match self {
            Input::File { name, .. } => name.clone(),
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
    /// Inputs that named a file already read, so the user can see that it was read once.
    pub repeats: Vec<Repeat>,
}

/// A file named again after it was already among the inputs: not read a second time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repeat {
    /// The path of the repeat, as given or found.
    pub path: PathBuf,
    /// The path of the input that is read, as given or found.
    pub read_as: PathBuf,
    /// How many times `path` named it again.
    pub times: usize,
}

impl fmt::Display for Repeat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Compared as spelt: `x/./a` and `x/a` are equal paths, but only one of them was typed.
        if self.path.as_os_str() == self.read_as.as_os_str() {
            match self.times {
                1 => write!(f, "{} given twice; read once", self.path.display()),
                n => write!(
                    f,
                    "{} given {} times; read once",
                    self.path.display(),
                    n + 1
                ),
            }
        } else {
            write!(
                f,
                "{} is the same file as {}; read once",
                self.path.display(),
                self.read_as.display()
            )
        }
    }
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
    #[error("{path}")]
    Io {
        /// What could not be listed or read.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

/// A file as found, before repeats are dropped and names settled.
struct Found {
    path: PathBuf,
    /// Its path relative to what the user typed (the path itself for a file typed as such).
    short: PathBuf,
}

/// Resolves command-line arguments into the files to read.
pub fn resolve(args: &[PathBuf]) -> Result<Inputs, InputError> {
    let mut found: Vec<Option<Found>> = Vec::new();
    let mut skipped = Vec::new();
    for arg in args {
        if arg.as_os_str() == "-" {
            if found.iter().any(Option::is_none) {
                return Err(InputError::StdinTwice);
            }
            found.push(None);
        } else if arg.is_dir() {
            let before = found.len();
            directory(arg, &mut found, &mut skipped)?;
            if found.len() == before {
                return Err(InputError::EmptyDirectory(arg.clone()));
            }
        } else if arg.exists() {
            found.push(Some(Found {
                path: arg.clone(),
                short: arg.clone(),
            }));
        } else if is_pattern(arg) {
            pattern(arg, &mut found)?;
        } else {
            return Err(InputError::NotFound(arg.clone()));
        }
    }
    if found.is_empty() {
        return Err(InputError::Nothing);
    }
    let (kept, repeats) = once_each(found)?;
    Ok(Inputs {
        files: named(kept),
        skipped,
        repeats,
    })
}

/// What a file is on disk, whatever path reaches it.
#[cfg(unix)]
fn identity(path: &Path) -> std::io::Result<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path)?;
    Ok((m.dev(), m.ino()))
}

/// What a file is on disk, whatever path reaches it.
#[cfg(not(unix))]
fn identity(path: &Path) -> std::io::Result<PathBuf> {
    std::fs::canonicalize(path)
}

/// The inputs with each file once, at its first naming, and the repeats that were dropped.
fn once_each(found: Vec<Option<Found>>) -> Result<(Vec<Option<Found>>, Vec<Repeat>), InputError> {
    let mut first = HashMap::new();
    let mut kept: Vec<Option<Found>> = Vec::with_capacity(found.len());
    let mut repeats: Vec<Repeat> = Vec::new();
    for f in found {
        let Some(file) = f else {
            kept.push(None);
            continue;
        };
        let id = identity(&file.path).map_err(|source| InputError::Io {
            path: file.path.clone(),
            source,
        })?;
        match first.get(&id) {
            None => {
                first.insert(id, kept.len());
                kept.push(Some(file));
            }
            Some(&k) => {
                let read_as = kept[k].as_ref().map(|f| f.path.clone()).unwrap_or_default();
                match repeats
                    .iter_mut()
                    .find(|r| r.path.as_os_str() == file.path.as_os_str() && r.read_as == read_as)
                {
                    Some(r) => r.times += 1,
                    None => repeats.push(Repeat {
                        path: file.path,
                        read_as,
                        times: 1,
                    }),
                }
            }
        }
    }
    Ok((kept, repeats))
}

/// Each file named by its short path, but where two would share a name: those keep their whole path.
fn named(files: Vec<Option<Found>>) -> Vec<Input> {
    let mut names: Vec<String> = files
        .iter()
        .map(|f| {
            f.as_ref()
                .map_or("-".to_owned(), |f| f.short.display().to_string())
        })
        .collect();
    loop {
        let mut count: HashMap<&str, usize> = HashMap::new();
        for n in &names {
            *count.entry(n.as_str()).or_default() += 1;
        }
        let clash: Vec<usize> = (0..names.len())
            .filter(|&i| count[names[i].as_str()] > 1)
            .filter(|&i| {
                files[i]
                    .as_ref()
                    .is_some_and(|f| f.path.display().to_string() != names[i])
            })
            .collect();
        if clash.is_empty() {
            break;
        }
        for i in clash {
            if let Some(f) = &files[i] {
                names[i] = f.path.display().to_string();
            }
        }
    }
    files
        .into_iter()
        .zip(names)
        .map(|(f, name)| match f {
            Some(f) => Input::File { path: f.path, name },
            None => Input::Stdin,
        })
        .collect()
}

fn is_pattern(p: &Path) -> bool {
    p.to_string_lossy().contains(['*', '?', '['])
}

/// The directories a pattern starts with before its first wildcard: what its matches are named against.
fn fixed_prefix(p: &Path) -> PathBuf {
    p.components()
        .take_while(|c| !is_pattern(Path::new(c.as_os_str())))
        .collect()
}

fn pattern(p: &Path, out: &mut Vec<Option<Found>>) -> Result<(), InputError> {
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
    let prefix = fixed_prefix(p);
    out.extend(found.into_iter().map(|path| {
        let short = relative(&path, &prefix);
        Some(Found { path, short })
    }));
    Ok(())
}

/// `path` relative to `base`, or `path` itself where it does not lie under `base`.
fn relative(path: &Path, base: &Path) -> PathBuf {
    match path.strip_prefix(base) {
        Ok(rest) if !rest.as_os_str().is_empty() => rest.to_path_buf(),
        _ => path.to_path_buf(),
    }
}

/// Every capture directly inside `dir`, recognised by its first bytes, in name order.
fn directory(
    dir: &Path,
    out: &mut Vec<Option<Found>>,
    skipped: &mut Vec<(PathBuf, String)>,
) -> Result<(), InputError> {
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
            Ok(()) => {
                let short = relative(&path, dir);
                out.push(Some(Found { path, short }));
            }
            Err(why) => skipped.push((path, why)),
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

    fn file(path: &Path, name: &str) -> Input {
        Input::File {
            path: path.to_path_buf(),
            name: name.to_owned(),
        }
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
        // Named relative to the directory given.
        assert_eq!(
            inputs.files,
            [
                file(&b, "run.00000.pcap"),
                file(&a, "run.00001.pcap"),
                file(&gz, "z.pcap.gz")
            ]
        );
        assert_eq!(inputs.skipped.len(), 1);
        assert_eq!(inputs.skipped[0].0, txt);
        assert!(inputs.repeats.is_empty());

        // Named relative to the pattern's directories; a file given as such keeps the path as typed.
        let pattern = d.join("run.*.pcap");
        let inputs = resolve(&[pattern, PathBuf::from("-"), gz.clone()]).unwrap();
        assert_eq!(
            inputs.files,
            [
                file(&b, "run.00000.pcap"),
                file(&a, "run.00001.pcap"),
                Input::Stdin,
                file(&gz, &gz.display().to_string())
            ]
        );
        let sub = d.join("sub");
        std::fs::create_dir(&sub).unwrap();
        let c = write(&sub, "c.pcap", &pcap);
        let inputs = resolve(&[d.join("*/c.pcap")]).unwrap();
        assert_eq!(inputs.files, [file(&c, "sub/c.pcap")]);
    }

    /// The same file reached again (the same path, another spelling of it, a symlink, a directory or a
    /// pattern that holds it) is read once, and the repeat is reported.
    #[cfg(unix)]
    #[test]
    fn each_file_is_read_once_however_often_it_is_named() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        let pcap = 0xa1b2_c3d4u32.to_le_bytes();
        let a = write(d, "a.pcap", &pcap);
        let b = write(d, "b.pcap", &pcap);
        let dotted = d.join(".").join("a.pcap");
        let link = d.join("link.pcap");
        std::os::unix::fs::symlink(&a, &link).unwrap();
        let args = [
            a.clone(),
            a.clone(),
            dotted.clone(),
            d.join("*.pcap"),
            a.clone(),
            d.to_path_buf(),
        ];
        let inputs = resolve(&args).unwrap();
        assert_eq!(
            inputs.files,
            [file(&a, &a.display().to_string()), file(&b, "b.pcap")]
        );
        let notes: Vec<String> = inputs.repeats.iter().map(ToString::to_string).collect();
        let (a_, dotted_, link_, b_) = (a.display(), dotted.display(), link.display(), b.display());
        assert_eq!(
            notes,
            [
                // Three times as typed, once by the pattern and once in the directory.
                format!("{a_} given 5 times; read once"),
                format!("{dotted_} is the same file as {a_}; read once"),
                format!("{link_} is the same file as {a_}; read once"),
                format!("{b_} given twice; read once"),
            ]
        );
    }

    /// Two files that would share a name (the same file name in two directories) keep their whole paths;
    /// the others keep their short names.
    #[test]
    fn names_that_would_clash_keep_their_paths() {
        let tmp = tempfile::tempdir().unwrap();
        let (x, y) = (tmp.path().join("x"), tmp.path().join("y"));
        std::fs::create_dir(&x).unwrap();
        std::fs::create_dir(&y).unwrap();
        let pcap = 0xa1b2_c3d4u32.to_le_bytes();
        let (xr, yr) = (write(&x, "run.pcap", &pcap), write(&y, "run.pcap", &pcap));
        let only = write(&y, "only.pcap", &pcap);
        let inputs = resolve(&[x.clone(), y.clone()]).unwrap();
        assert_eq!(
            inputs.files,
            [
                file(&xr, &xr.display().to_string()),
                file(&only, "only.pcap"),
                file(&yr, &yr.display().to_string())
            ]
        );
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
