//! The doctor's findings: one line per link of the chain from install to a mutated pod, the
//! first broken one named, as a table for a person or JSON for a script. Pure.

use std::fmt::Write as _;

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    /// Works, but something a person should know (e.g. no namespace opted in yet).
    Warn,
    /// Broken: pods are not mutated, or not protected, because of it.
    Fail,
    /// Not checked, because an earlier link is broken or it does not apply.
    Skip,
}

impl Status {
    fn label(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Fail => "FAIL",
            Status::Skip => "skip",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Check {
    pub name: &'static str,
    pub status: Status,
    pub detail: String,
}

impl Check {
    pub fn new(name: &'static str, status: Status, detail: impl Into<String>) -> Self {
        Check {
            name,
            status,
            detail: detail.into(),
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Report {
    pub checks: Vec<Check>,
}

/// What `-o json` prints.
#[derive(serde::Serialize)]
struct JsonReport<'a> {
    healthy: bool,
    first_broken: Option<&'a str>,
    checks: &'a [Check],
}

impl Report {
    pub fn push(&mut self, check: Check) {
        self.checks.push(check);
    }

    pub fn first_broken(&self) -> Option<&Check> {
        self.checks.iter().find(|c| c.status == Status::Fail)
    }

    pub fn healthy(&self) -> bool {
        self.first_broken().is_none()
    }

    pub fn table(&self) -> String {
        let width = self
            .checks
            .iter()
            .map(|c| c.name.len())
            .max()
            .unwrap_or(5)
            .max(5);
        let mut out = format!("{:<width$}  {:<6}  DETAIL\n", "CHECK", "STATUS");
        for c in &self.checks {
            let _ = writeln!(
                out,
                "{:<width$}  {:<6}  {}",
                c.name,
                c.status.label(),
                c.detail
            );
        }
        match self.first_broken() {
            Some(c) => {
                let _ = writeln!(out, "\nfirst broken link: {}: {}", c.name, c.detail);
            }
            None => out.push_str("\nthe install works\n"),
        }
        out
    }

    pub fn json(&self) -> String {
        let report = JsonReport {
            healthy: self.healthy(),
            first_broken: self.first_broken().map(|c| c.name),
            checks: &self.checks,
        };
        serde_json::to_string_pretty(&report).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(statuses: &[(&'static str, Status)]) -> Report {
        Report {
            checks: statuses
                .iter()
                .map(|(n, s)| Check::new(n, *s, format!("{n} detail")))
                .collect(),
        }
    }

    /// (what, the checks' names and statuses, the first broken one).
    type Case<'a> = (&'a str, &'a [(&'static str, Status)], Option<&'a str>);

    #[test]
    fn first_broken_link_table() {
        let cases: &[Case<'_>] = &[
            ("all ok", &[("a", Status::Ok), ("b", Status::Ok)], None),
            (
                "warnings are not broken",
                &[("a", Status::Warn), ("b", Status::Skip)],
                None,
            ),
            (
                "the first failure, not a later one",
                &[("a", Status::Ok), ("b", Status::Fail), ("c", Status::Fail)],
                Some("b"),
            ),
        ];
        for (what, checks, want) in cases {
            let r = report(checks);
            assert_eq!(r.first_broken().map(|c| c.name), *want, "{what}");
            assert_eq!(r.healthy(), want.is_none(), "{what}");
        }
    }

    #[test]
    fn table_and_json_name_the_broken_link() {
        let r = report(&[("deployment", Status::Ok), ("ca-bundle", Status::Fail)]);
        let table = r.table();
        assert!(table.contains("ca-bundle   FAIL"), "{table}");
        assert!(
            table.ends_with("first broken link: ca-bundle: ca-bundle detail\n"),
            "{table}"
        );
        let json: serde_json::Value = serde_json::from_str(&r.json()).expect("json");
        assert_eq!(json["healthy"], false);
        assert_eq!(json["first_broken"], "ca-bundle");
        assert_eq!(json["checks"][1]["status"], "fail");
        let good = report(&[("deployment", Status::Ok)]);
        assert!(good.table().ends_with("the install works\n"));
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&good.json()).expect("json")["first_broken"],
            serde_json::Value::Null
        );
    }
}
