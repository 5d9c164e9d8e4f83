//! koordlet-style command lines, rewritten for clap before it parses them. Pure.
//!
//! The reference's documentation has users edit the koordlet DaemonSet and add Go `flag`
//! package arguments: `-feature-gates=CPICollector=true`, `-cpi-collector-interval-seconds=60`.
//! Go accepts a long flag with one dash or two, its value after `=` or as the next argument,
//! and `-flag=true|false` (also `1`, `t`, `F`, ...) for a boolean. clap takes `--flag=value`,
//! `--flag value` and a bare `--flag` for a boolean. [`normalize`] turns the first set into the
//! second for the flags this program has, and refuses an unknown long flag by the name the user
//! wrote, before clap would misread `-bogus` as the short flags `-b -o -g ...`.

use std::ffi::OsString;

/// What a long flag takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlagKind {
    /// `--flag value` or `--flag=value`.
    Value,
    /// A switch: `--flag`; Go's `-flag=true|false` is accepted too.
    Bool,
}

/// One long flag of the command line (any subcommand's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlagSpec {
    pub name: String,
    pub kind: FlagKind,
}

impl FlagSpec {
    pub fn new(name: &str, kind: FlagKind) -> Self {
        Self {
            name: name.to_owned(),
            kind,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GoFlagError {
    #[error(
        "unknown flag {given:?}: koord-applier takes its own flags only, with one dash or two (`{prog} --help` lists them)"
    )]
    Unknown { given: String, prog: String },
    #[error("flag {given:?}: {value:?} is not a boolean (true, false, 1, 0, t, f)")]
    NotBool { given: String, value: String },
}

/// Go's `strconv.ParseBool`.
fn parse_go_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

/// A long-flag candidate: `-name[=v]` or `--name[=v]` whose name starts with a letter and is
/// longer than one character (`-f` is a short flag, `-5` a value). Returns (name, value).
fn long_flag(arg: &str) -> Option<(&str, Option<&str>)> {
    let body = arg
        .strip_prefix("--")
        .or_else(|| arg.strip_prefix('-'))
        .filter(|b| !b.starts_with('-'))?;
    let (name, value) = match body.split_once('=') {
        Some((n, v)) => (n, Some(v)),
        None => (body, None),
    };
    let long_enough = name.chars().count() > 1;
    let starts_alpha = name.chars().next().is_some_and(|c| c.is_ascii_alphabetic());
    (long_enough && starts_alpha).then_some((name, value))
}

/// Rewrites `args` (program name first) into clap's forms, see the module doc. Arguments after
/// `--`, values of value flags and anything that is not a long flag pass unchanged.
pub fn normalize(args: Vec<OsString>, specs: &[FlagSpec]) -> Result<Vec<OsString>, GoFlagError> {
    let mut it = args.into_iter();
    let Some(prog) = it.next() else {
        return Ok(Vec::new());
    };
    let prog_name = prog.to_string_lossy().into_owned();
    let mut out = vec![prog];
    let mut value_next = false;
    let mut rest_verbatim = false;
    for arg in it {
        if rest_verbatim || value_next {
            value_next = false;
            out.push(arg);
            continue;
        }
        let Some(text) = arg.to_str() else {
            out.push(arg);
            continue;
        };
        if text == "--" {
            rest_verbatim = true;
            out.push(arg);
            continue;
        }
        let Some((name, value)) = long_flag(text) else {
            out.push(arg);
            continue;
        };
        let Some(spec) = specs.iter().find(|s| s.name == name) else {
            return Err(GoFlagError::Unknown {
                given: text.to_owned(),
                prog: prog_name,
            });
        };
        match (spec.kind, value) {
            (FlagKind::Value, Some(v)) => out.push(format!("--{name}={v}").into()),
            (FlagKind::Value, None) => {
                out.push(format!("--{name}").into());
                value_next = true;
            }
            (FlagKind::Bool, None) => out.push(format!("--{name}").into()),
            (FlagKind::Bool, Some(v)) => match parse_go_bool(v) {
                Some(true) => out.push(format!("--{name}").into()),
                Some(false) => {}
                None => {
                    return Err(GoFlagError::NotBool {
                        given: text.to_owned(),
                        value: v.to_owned(),
                    });
                }
            },
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn specs() -> Vec<FlagSpec> {
        vec![
            FlagSpec::new("feature-gates", FlagKind::Value),
            FlagSpec::new("cpi-collector-interval-seconds", FlagKind::Value),
            FlagSpec::new("filename", FlagKind::Value),
            FlagSpec::new("node-name", FlagKind::Value),
            FlagSpec::new("dry-run", FlagKind::Bool),
            FlagSpec::new("help", FlagKind::Bool),
        ]
    }

    fn run(args: &[&str]) -> Result<Vec<String>, GoFlagError> {
        let mut all = vec!["koord-applier"];
        all.extend_from_slice(args);
        normalize(all.iter().map(OsString::from).collect(), &specs()).map(|v| {
            v.into_iter()
                .skip(1)
                .map(|a| a.into_string().expect("utf8"))
                .collect()
        })
    }

    #[test]
    fn rewrites_every_go_form() {
        let table: &[(&[&str], &[&str])] = &[
            // The reference's line, as a DaemonSet's args carry it.
            (
                &[
                    "run",
                    "-feature-gates=BECPUEvict=true,CPICollector=true",
                    "-cpi-collector-interval-seconds=60",
                ],
                &[
                    "run",
                    "--feature-gates=BECPUEvict=true,CPICollector=true",
                    "--cpi-collector-interval-seconds=60",
                ],
            ),
            // -flag value, --flag value, --flag=value.
            (&["run", "-node-name", "n1"], &["run", "--node-name", "n1"]),
            (&["run", "--node-name", "n1"], &["run", "--node-name", "n1"]),
            (&["run", "--node-name=n1"], &["run", "--node-name=n1"]),
            // A value that looks like a flag is the value of the flag before it.
            (
                &["run", "-node-name", "-weird"],
                &["run", "--node-name", "-weird"],
            ),
            // Booleans: bare, Go's =true/=1 (-> bare), =false/=0 (-> dropped).
            (&["once", "-dry-run"], &["once", "--dry-run"]),
            (&["once", "-dry-run=true"], &["once", "--dry-run"]),
            (&["once", "--dry-run=1"], &["once", "--dry-run"]),
            (&["once", "-dry-run=false"], &["once"]),
            (&["once", "-dry-run=F"], &["once"]),
            // Short flags, plain values, negative numbers and `-` are left alone.
            (&["once", "-f", "pod.yaml"], &["once", "-f", "pod.yaml"]),
            (&["once", "-f", "-"], &["once", "-f", "-"]),
            (&["-5"], &["-5"]),
            (&["-help"], &["--help"]),
            // After `--` nothing is rewritten.
            (&["run", "--", "-bogus"], &["run", "--", "-bogus"]),
        ];
        for (input, want) in table {
            let got = run(input).unwrap_or_else(|e| panic!("{input:?}: {e}"));
            assert_eq!(got, *want, "{input:?}");
        }
    }

    #[test]
    fn unknown_flags_are_refused_by_the_name_given() {
        let err = run(&["run", "-runtime-hooks-network=tcp"]).expect_err("unknown");
        assert_eq!(
            err,
            GoFlagError::Unknown {
                given: "-runtime-hooks-network=tcp".into(),
                prog: "koord-applier".into()
            }
        );
        let text = err.to_string();
        assert!(
            text.starts_with("unknown flag \"-runtime-hooks-network=tcp\""),
            "{text}"
        );
        assert!(matches!(
            run(&["once", "--bogus"]),
            Err(GoFlagError::Unknown { .. })
        ));
        assert_eq!(
            run(&["once", "-dry-run=maybe"]),
            Err(GoFlagError::NotBool {
                given: "-dry-run=maybe".into(),
                value: "maybe".into()
            })
        );
    }
}
