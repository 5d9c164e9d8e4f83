//! The endpoint's limits (`--metrics-max-connections`, `--metrics-*-timeout-seconds`) and the
//! check of the connection cap against the open-file limit.

use std::time::Duration;

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

/// The connection cap is above what the open-file limit leaves the endpoint.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "--metrics-max-connections must be between 1 and {max} (a quarter of the {reserved} file \
     descriptors kept in reserve under the open-file limit of {nofile}), got {got}"
)]
pub struct EndpointError {
    got: usize,
    max: usize,
    reserved: usize,
    nofile: usize,
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
        Err(EndpointError {
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
}
