//! The API client both binaries use, and how long their watches last.
//!
//! kube's client sets no read timeout: a list or watch whose connection dies without a close
//! waits forever, and the loop behind it with it (seen on a loaded cgroup v2 node: the
//! applier's re-list after a 410 never returned and the node's new pods went unapplied). Every
//! watch of both binaries asks the server to end it after [`WATCH_TIMEOUT_SECS`], so a read
//! that waits [`READ_TIMEOUT_MARGIN`] longer is a dead connection: it fails and the watcher
//! lists again.

use std::time::Duration;

/// How long one watch request lasts before kube's watcher renews it from the last
/// resourceVersion (the apiserver's default is about 5 minutes). A watch that stops delivering
/// without closing would otherwise leave a pod, a policy edit or an opt-in unseen for that long;
/// a minute bounds it, for one cheap request a minute per watch.
pub const WATCH_TIMEOUT_SECS: u32 = 60;
const _: () = assert!(
    WATCH_TIMEOUT_SECS < 290,
    "shorter than the apiserver's default"
);

/// A read may wait this much longer than a watch lasts.
pub const READ_TIMEOUT_MARGIN: Duration = Duration::from_secs(30);

/// `config` with the read timeout (the watch length + the margin), counted from each request
/// rather than from when a pooled connection went idle.
pub fn with_read_timeout(mut config: kube::Config) -> kube::Config {
    config.read_timeout =
        Some(Duration::from_secs(u64::from(WATCH_TIMEOUT_SECS)) + READ_TIMEOUT_MARGIN);
    config.reset_reader_on_write = true;
    config
}

/// In-cluster or kubeconfig credentials, with the read timeout.
pub async fn api_client() -> Result<kube::Client, kube::Error> {
    let config = kube::Config::infer()
        .await
        .map_err(kube::Error::InferConfig)?;
    kube::Client::try_from(with_read_timeout(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_time_out_after_a_watch_would_have_ended() {
        let base = kube::Config::new("https://127.0.0.1:6443".parse().expect("a URI"));
        assert_eq!(base.read_timeout, None, "kube sets none by itself");
        let c = with_read_timeout(base);
        assert_eq!(c.read_timeout, Some(Duration::from_secs(90)));
        assert!(c.reset_reader_on_write);
    }
}
