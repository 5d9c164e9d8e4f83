//! The endpoint's limits: flags, the settings they make, and the check of the connection cap
//! against the open-file limit.

use std::time::Duration;

use clap::Args;

/// Flags of the `/metrics`, `/healthz`, `/readyz` endpoint.
#[derive(Debug, Clone, Args)]
pub struct EndpointArgs {
    /// Connections the metrics endpoint holds open at once. At the cap a new connection
    /// closes the oldest one whose request has not arrived yet, of the source address holding
    /// the most such connections; at most a quarter of the
    /// file descriptors the applier keeps in reserve (256 with a limit above 2048).
    #[arg(long, env = "KOORD_METRICS_MAX_CONNECTIONS", default_value_t = 64)]
    pub metrics_max_connections: usize,
    /// A connection whose request head has not arrived this long after it opened is closed
    /// (silent clients, heads sent a byte at a time).
    #[arg(
        long,
        env = "KOORD_METRICS_HEADER_READ_TIMEOUT_SECONDS",
        default_value_t = 5
    )]
    pub metrics_header_read_timeout_seconds: u64,
    /// Once the head is in, the answer must be written within this (a client that does not
    /// read it is closed).
    #[arg(
        long,
        env = "KOORD_METRICS_WRITE_TIMEOUT_SECONDS",
        default_value_t = 10
    )]
    pub metrics_write_timeout_seconds: u64,
}

/// The endpoint's limits, as used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndpointSettings {
    pub max_connections: usize,
    pub header_read_timeout: Duration,
    pub write_timeout: Duration,
}

impl Default for EndpointSettings {
    /// The flags' defaults.
    fn default() -> Self {
        EndpointSettings {
            max_connections: 64,
            header_read_timeout: Duration::from_secs(5),
            write_timeout: Duration::from_secs(10),
        }
    }
}

impl EndpointSettings {
    /// A connection is closed this long after it opened, whatever it does.
    pub fn lifetime(&self) -> Duration {
        self.header_read_timeout + self.write_timeout
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum EndpointError {
    #[error("--metrics-{flag}-timeout-seconds must be between 1 and 300, got {got}")]
    Timeout { flag: &'static str, got: u64 },
    #[error(
        "--metrics-max-connections must be between 1 and {max} (a quarter of the {reserved} file \
         descriptors kept in reserve under the open-file limit of {nofile}), got {got}"
    )]
    Connections {
        got: usize,
        max: usize,
        reserved: usize,
        nofile: usize,
    },
}

impl TryFrom<&EndpointArgs> for EndpointSettings {
    type Error = EndpointError;
    fn try_from(a: &EndpointArgs) -> Result<Self, EndpointError> {
        let timeout = |flag, got: u64| {
            if (1..=300).contains(&got) {
                Ok(Duration::from_secs(got))
            } else {
                Err(EndpointError::Timeout { flag, got })
            }
        };
        Ok(EndpointSettings {
            max_connections: a.metrics_max_connections,
            header_read_timeout: timeout("header-read", a.metrics_header_read_timeout_seconds)?,
            write_timeout: timeout("write", a.metrics_write_timeout_seconds)?,
        })
    }
}

/// Checks the cap against the soft open-file limit now in force: the endpoint may take at
/// most a quarter of the descriptors the applier keeps out of its knob-file budget, so a
/// client holding every slot leaves the reconcile loop, the watch and the Event posts the
/// other three quarters.
pub fn check_cap(max_connections: usize, nofile_soft: usize) -> Result<(), EndpointError> {
    let reserved = koord_translator::cgroup::writer::reserved_fds(nofile_soft);
    let max = reserved / 4;
    if (1..=max).contains(&max_connections) {
        Ok(())
    } else {
        Err(EndpointError::Connections {
            got: max_connections,
            max,
            reserved,
            nofile: nofile_soft,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_is_a_quarter_of_the_reserve() {
        let table = [
            // (cap, soft limit, accepted)
            (64, 1_048_576, true),
            (256, 1_048_576, true),
            (257, 1_048_576, false),
            (64, 20_000, true),
            (64, 1024, true),
            (128, 1024, true),
            (129, 1024, false),
            (64, 512, true),
            (64, 256, false),
            (0, 1_048_576, false),
        ];
        for (cap, soft, ok) in table {
            assert_eq!(check_cap(cap, soft).is_ok(), ok, "cap {cap} under {soft}");
        }
    }

    #[test]
    fn a_refused_cap_names_the_flag_and_the_range() {
        let e = check_cap(300, 1024).expect_err("too many").to_string();
        assert!(
            e.contains("--metrics-max-connections must be between 1 and 128"),
            "{e}"
        );
        assert!(e.contains("1024"), "{e}");
    }

    #[test]
    fn timeouts_are_checked() {
        let args = |h, w| EndpointArgs {
            metrics_max_connections: 64,
            metrics_header_read_timeout_seconds: h,
            metrics_write_timeout_seconds: w,
        };
        let ok = EndpointSettings::try_from(&args(5, 10)).expect("valid");
        assert_eq!(ok, EndpointSettings::default());
        assert_eq!(ok.lifetime(), Duration::from_secs(15));
        assert_eq!(
            EndpointSettings::try_from(&args(0, 10)),
            Err(EndpointError::Timeout {
                flag: "header-read",
                got: 0
            })
        );
        let e = EndpointSettings::try_from(&args(5, 301)).expect_err("too long");
        assert_eq!(
            e.to_string(),
            "--metrics-write-timeout-seconds must be between 1 and 300, got 301"
        );
    }
}
