//! Pressure stall information: the parser for `cpu.pressure`, `memory.pressure` and
//! `io.pressure`, and reading the three files of one cgroup through its directory handle.
//!
//! The format (Documentation/accounting/psi.rst) is one `some` line and, where the kernel
//! has it, one `full` line: `some avg10=0.00 avg60=0.00 avg300=0.00 total=0`. A missing `full`
//! line is normal (CPU before 5.13, and `/proc/pressure/cpu`-like files); anything else is
//! malformed, as in Koordinator's `ParsePSIStats`. Written by hand: `procfs` requires both
//! lines.

use std::io;
use std::os::fd::AsFd;

use koord_translator::cgroup::file as cgroup_file;

/// One line: the kernel's running averages (percent of wall time) and the total stall (µs).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct PsiLine {
    pub avg10: f64,
    pub avg60: f64,
    pub avg300: f64,
    pub total_us: u64,
}

impl PsiLine {
    /// The averages in the order of [`PRECISIONS`].
    pub fn avgs(&self) -> [f64; 3] {
        [self.avg10, self.avg60, self.avg300]
    }
}

/// The `psi_precision` label values, in the order of [`PsiLine::avgs`].
pub const PRECISIONS: [&str; 3] = ["avg10", "avg60", "avg300"];

/// One pressure file.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Psi {
    pub some: PsiLine,
    /// `None` when the kernel prints no `full` line for this resource.
    pub full: Option<PsiLine>,
}

/// A resource with a pressure file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Resource {
    Cpu,
    Mem,
    Io,
}

impl Resource {
    pub const ALL: [Resource; 3] = [Resource::Cpu, Resource::Mem, Resource::Io];

    /// The file name in the cgroup directory.
    pub fn file(self) -> &'static str {
        match self {
            Resource::Cpu => "cpu.pressure",
            Resource::Mem => "memory.pressure",
            Resource::Io => "io.pressure",
        }
    }

    /// The reference's `psi_resource_type` label value.
    pub fn label(self) -> &'static str {
        match self {
            Resource::Cpu => "cpu",
            Resource::Mem => "mem",
            Resource::Io => "io",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PsiParseError {
    #[error("no `some` line")]
    NoSome,
    #[error("line {0:?} is neither `some ...` nor `full ...`")]
    Prefix(String),
    #[error("line {0:?} lacks avg10, avg60, avg300 or total, or has a bad number")]
    Field(String),
    #[error("duplicate `{0}` line")]
    Duplicate(&'static str),
}

fn parse_line(fields: &str, whole: &str) -> Result<PsiLine, PsiParseError> {
    let bad = || PsiParseError::Field(whole.to_owned());
    let (mut a10, mut a60, mut a300, mut total) = (None, None, None, None);
    for kv in fields.split_ascii_whitespace() {
        let (k, v) = kv.split_once('=').ok_or_else(bad)?;
        match k {
            "avg10" => a10 = Some(v.parse::<f64>().map_err(|_| bad())?),
            "avg60" => a60 = Some(v.parse::<f64>().map_err(|_| bad())?),
            "avg300" => a300 = Some(v.parse::<f64>().map_err(|_| bad())?),
            "total" => total = Some(v.parse::<u64>().map_err(|_| bad())?),
            // Newer kernels may add fields; ignore what we do not export.
            _ => {}
        }
    }
    let (Some(avg10), Some(avg60), Some(avg300), Some(total_us)) = (a10, a60, a300, total) else {
        return Err(bad());
    };
    if ![avg10, avg60, avg300]
        .iter()
        .all(|v| v.is_finite() && *v >= 0.0)
    {
        return Err(bad());
    }
    Ok(PsiLine {
        avg10,
        avg60,
        avg300,
        total_us,
    })
}

/// Parses the text of one pressure file.
pub fn parse(text: &str) -> Result<Psi, PsiParseError> {
    let (mut some, mut full) = (None, None);
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if let Some(rest) = line.strip_prefix("some ") {
            if some.is_some() {
                return Err(PsiParseError::Duplicate("some"));
            }
            some = Some(parse_line(rest, line)?);
        } else if let Some(rest) = line.strip_prefix("full ") {
            if full.is_some() {
                return Err(PsiParseError::Duplicate("full"));
            }
            full = Some(parse_line(rest, line)?);
        } else {
            return Err(PsiParseError::Prefix(line.to_owned()));
        }
    }
    Ok(Psi {
        some: some.ok_or(PsiParseError::NoSome)?,
        full,
    })
}

/// Why one cgroup's pressure could not be read.
#[derive(Debug, thiserror::Error)]
pub enum PsiReadError {
    /// The file does not exist (no PSI in this kernel or hierarchy, or the cgroup is gone).
    #[error("{file} missing")]
    Missing { file: &'static str },
    /// The kernel refuses the read (`psi=0`, or pressure disabled for the cgroup).
    #[error("{file}: PSI disabled ({source})")]
    Disabled {
        file: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("{file}: {source}")]
    Io {
        file: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("{file}: {source}")]
    Parse {
        file: &'static str,
        #[source]
        source: PsiParseError,
    },
}

/// Reads and parses `resource`'s pressure file below `dir` (a handle from
/// `cgroup::file::open_dir`). No allocation on success: the files are under 200 bytes and
/// read into a stack buffer.
pub fn read_resource(dir: impl AsFd, resource: Resource) -> Result<Psi, PsiReadError> {
    let file = resource.file();
    let mut buf = [0u8; 512];
    let len = match cgroup_file::read_at_into(dir, file, &mut buf) {
        Ok(Some(len)) => len,
        Ok(None) => return Err(PsiReadError::Missing { file }),
        Err(e) if rustix::io::Errno::from_io_error(&e) == Some(rustix::io::Errno::OPNOTSUPP) => {
            return Err(PsiReadError::Disabled { file, source: e });
        }
        Err(source) => return Err(PsiReadError::Io { file, source }),
    };
    let text = std::str::from_utf8(&buf[..len]).map_err(|_| PsiReadError::Parse {
        file,
        source: PsiParseError::NoSome,
    })?;
    parse(text).map_err(|source| PsiReadError::Parse { file, source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_some_and_full() {
        let p = parse(
            "some avg10=63.61 avg60=65.01 avg300=58.82 total=776721834\n\
             full avg10=0.30 avg60=0.61 avg300=0.31 total=9423625\n",
        )
        .expect("valid");
        assert_eq!(
            p.some,
            PsiLine {
                avg10: 63.61,
                avg60: 65.01,
                avg300: 58.82,
                total_us: 776_721_834
            }
        );
        assert_eq!(p.full.expect("full").avgs(), [0.30, 0.61, 0.31]);
        assert_eq!(p.full.expect("full").total_us, 9_423_625);
    }

    #[test]
    fn full_line_is_optional() {
        let p = parse("some avg10=1.50 avg60=0.00 avg300=0.25 total=42\n").expect("valid");
        assert_eq!(p.some.avgs(), [1.5, 0.0, 0.25]);
        assert_eq!(p.full, None);
    }

    #[test]
    fn malformed_is_refused() {
        for bad in [
            "",
            "\n",
            "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
            "some avg10=0.00 avg60=0.00 total=0\n",
            "some avg10=x avg60=0.00 avg300=0.00 total=0\n",
            "some avg10=0.00 avg60=0.00 avg300=0.00 total=-1\n",
            "some avg10=-1 avg60=0.00 avg300=0.00 total=1\n",
            "some avg10=NaN avg60=0.00 avg300=0.00 total=1\n",
            "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nhalf avg10=0.00\n",
            "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nsome avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
            "some avg10 avg60=0.00 avg300=0.00 total=0\n",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} must be refused");
        }
    }

    #[test]
    fn reads_through_dir_handle() {
        let tmp = tempfile::tempdir().expect("tmp");
        std::fs::write(
            tmp.path().join("io.pressure"),
            "some avg10=2.42 avg60=2.91 avg300=1.74 total=21565651\nfull avg10=0.30 avg60=0.61 avg300=0.31 total=9423625\n",
        )
        .expect("write");
        std::fs::write(tmp.path().join("cpu.pressure"), "bogus\n").expect("write");
        let dir = cgroup_file::open_dir(tmp.path()).expect("open");
        let io = read_resource(&dir, Resource::Io).expect("io");
        assert_eq!(io.some.avg60, 2.91);
        assert!(matches!(
            read_resource(&dir, Resource::Mem),
            Err(PsiReadError::Missing {
                file: "memory.pressure"
            })
        ));
        assert!(matches!(
            read_resource(&dir, Resource::Cpu),
            Err(PsiReadError::Parse { .. })
        ));
    }
}
