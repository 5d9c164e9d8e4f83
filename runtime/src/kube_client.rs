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
pub fn with_read_timeout(config: kube::Config) -> kube::Config {
    read_timeout(
        config,
        Duration::from_secs(u64::from(WATCH_TIMEOUT_SECS)) + READ_TIMEOUT_MARGIN,
    )
}

fn read_timeout(mut config: kube::Config, timeout: Duration) -> kube::Config {
    config.read_timeout = Some(timeout);
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
    use futures::StreamExt as _;
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::{Api, ListParams};
    use kube::runtime::watcher;
    use tokio::io::AsyncReadExt as _;

    use super::*;

    /// An API server whose connections die without a close: it reads the request and never
    /// answers (the re-list seen hanging on the loaded node). Returns its URL.
    async fn silent_server() -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("address");
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 4096];
                    while matches!(conn.read(&mut buf).await, Ok(n) if n > 0) {}
                });
            }
        });
        format!("http://{addr}")
    }

    fn client(url: &str, timeout: Option<Duration>) -> kube::Client {
        let base = kube::Config::new(url.parse().expect("a URI"));
        let config = match timeout {
            Some(t) => read_timeout(base, t),
            None => base,
        };
        kube::Client::try_from(config).expect("client")
    }

    #[tokio::test]
    async fn a_list_that_never_answers_fails_at_the_read_timeout() {
        let url = silent_server().await;
        let list =
            |c: kube::Client| async move { Api::<Pod>::all(c).list(&ListParams::default()).await };
        // Without the read timeout the list is still waiting (what stalled the watch)...
        let without = client(&url, None);
        assert!(
            tokio::time::timeout(Duration::from_secs(2), list(without))
                .await
                .is_err(),
            "kube's default client gave up on a silent server by itself"
        );
        // ...with it, it fails, and the watcher built on it reports the error (and lists again)
        // instead of waiting for ever.
        let with = client(&url, Some(Duration::from_millis(300)));
        let got = tokio::time::timeout(Duration::from_secs(2), list(with.clone())).await;
        assert!(
            matches!(got, Ok(Err(_))),
            "the list did not fail at its read timeout: {got:?}"
        );
        let mut events = watcher(Api::<Pod>::all(with), watcher::Config::default()).boxed();
        // (Its first event, `Init`, comes before the list is sent.)
        let failed = tokio::time::timeout(Duration::from_secs(2), async {
            while let Some(e) = events.next().await {
                if let Err(e) = e {
                    return Some(e);
                }
            }
            None
        })
        .await;
        assert!(
            matches!(failed, Ok(Some(_))),
            "the watcher did not surface the dead list: {failed:?}"
        );
    }

    #[test]
    fn reads_time_out_after_a_watch_would_have_ended() {
        let base = kube::Config::new("https://127.0.0.1:6443".parse().expect("a URI"));
        assert_eq!(base.read_timeout, None, "kube sets none by itself");
        let c = with_read_timeout(base);
        assert_eq!(c.read_timeout, Some(Duration::from_secs(90)));
        assert!(c.reset_reader_on_write);
    }
}
