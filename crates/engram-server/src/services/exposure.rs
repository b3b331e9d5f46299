//! Who may reach a node whose cluster is not enforced: open mode serves loopback only.
//!
//! In open mode every call is allowed to whoever makes it, so a node reachable from a network
//! would hand that network every namespace, and let it add a learner of its own (which then
//! receives everything), remove members or revoke their keys. Like Redis' protected mode, a
//! node therefore serves open mode beyond loopback only when told to (`--insecure-open`), and
//! never takes membership, key or policy changes from beyond loopback in open mode.
//!
//! The decision is made per request, from the address of the connection the call arrived on
//! and the mode the node's chain records (not from flags): an uninitialised node must stay up
//! to be initialised in enforced mode from the network, and a node learns its cluster's mode
//! from the chain. Start-up refuses only what is a mistake before any request
//! ([`refuse_at_start`]). Every node checks its own connection: a follower that relays a call
//! to the leader checked its caller first, and the leader checks the follower's connection,
//! so a call is served only if every hop was loopback (a forwarding marker is never trusted).
//!
//! What stays open to the network while a cluster is not enforced is what it takes to make it
//! enforced, and nothing that an enforced cluster would not serve to an unauthenticated caller:
//! `Cluster.Status` (peers read each other's id and key to initialise and join),
//! `Cluster.ProposeKeyChange` (carries a change signed by the node key it concerns, like Raft),
//! and `Cluster.Init` asking for enforced mode (checked in its handler, [`check_init`], since
//! the mode is in the message). The Raft service and health are not behind this check: Raft
//! requests are authenticated by node keys, and health says nothing.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use engram_access::Mode;

use super::Shared;
use crate::error::ApiError;

/// Calls that change membership, node keys or the policy: never taken from beyond loopback in
/// open mode, `--insecure-open` or not.
const ADMIN_PATHS: &[&str] = &[
    "/engram.v1.Cluster/AddNode",
    "/engram.v1.Cluster/RemoveNode",
    "/engram.v1.Cluster/RevokeKey",
    "/engram.v1.Cluster/RotateKey",
    "/engram.v1.Access/AddAgent",
    "/engram.v1.Access/RotateAgentKey",
    "/engram.v1.Access/RevokeAgent",
    "/engram.v1.Access/Grant",
    "/engram.v1.Access/RevokeGrant",
    "/engram.v1.Access/AssignRole",
    "/engram.v1.Access/UnassignRole",
    "/engram.v1.Access/SetAccessLog",
    "/engram.v1.Access/SetRetention",
];

/// Calls served to any peer whatever the mode (see the module docs); `Init` is checked in its
/// handler.
const PEER_PATHS: &[&str] = &[
    "/engram.v1.Cluster/Status",
    "/engram.v1.Cluster/ProposeKeyChange",
    "/engram.v1.Cluster/Init",
];

/// How to leave open mode, for every refusal.
const HOW_TO_ENFORCE: &str = "initialise the cluster in enforced mode (`engram agent keygen admin --out admin.key`, then `engram cluster init --security enforced --admin-key admin.key --member ...`, or start the nodes with --security enforced --admin NAME=PUBLIC_KEY --bootstrap)";

/// Whether a connection from `addr` comes from this host's loopback: 127.0.0.0/8, ::1, and
/// IPv4 loopback as a dual-stack socket bound to `::` reports it (`::ffff:127.x.y.z`).
pub fn is_loopback(addr: IpAddr) -> bool {
    match addr {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback()),
    }
}

/// Whether a node listening on `listen` can be reached from beyond its host: any address but
/// a loopback one (`0.0.0.0` and `::` included).
pub fn exposed(listen: SocketAddr) -> bool {
    !is_loopback(listen.ip())
}

/// Whether a call of `path` from `peer` (`None`: the transport did not say, taken as remote)
/// is served by a node whose chain records `mode` (`None`: not recorded yet), started with or
/// without `--insecure-open`. A pure function of its inputs; [`Exposure`] feeds it.
#[cfg_attr(madsim, allow(dead_code))] // the simulation's network carries its own clients only
pub fn check(
    path: &str,
    peer: Option<SocketAddr>,
    mode: Option<Mode>,
    insecure_open: bool,
) -> Result<(), ApiError> {
    if peer.is_some_and(|p| is_loopback(p.ip())) || mode == Some(Mode::Enforced) {
        return Ok(());
    }
    if PEER_PATHS.contains(&path) {
        return Ok(());
    }
    let who = peer.map_or_else(
        || "a caller whose address is unknown".to_string(),
        |p| p.ip().to_string(),
    );
    let state = match mode {
        Some(_) => "this cluster is in open mode",
        None => "this cluster is not initialised yet",
    };
    if ADMIN_PATHS.contains(&path) {
        return Err(ApiError::PermissionDenied(format!(
            "{state}, where membership, key and policy changes are taken from loopback only, and {who} is not loopback: run the command on the node's own host, or {HOW_TO_ENFORCE}"
        )));
    }
    if insecure_open {
        return Ok(());
    }
    if mode.is_none() {
        // A transient refusal: a cluster bootstrapped with `--security enforced` has a leader
        // a moment before its chain records the mode, and then serves this caller. Clients
        // retry UNAVAILABLE; a cluster that records open mode answers as below from then on.
        return Err(ApiError::Unavailable(format!(
            "{state} (its security mode is not recorded), and until it is only loopback callers are served ({who} is not one): retry once the cluster is initialised with --security enforced, or {HOW_TO_ENFORCE}; or start every node with --insecure-open (ENGRAM_INSECURE_OPEN=true) to let anyone who reaches it read and write everything"
        )));
    }
    Err(ApiError::Conflict(format!(
        "{state}, and open mode serves loopback callers only ({who} is not one): {HOW_TO_ENFORCE}; or start every node with --insecure-open (ENGRAM_INSECURE_OPEN=true) to let anyone who reaches it read and write everything"
    )))
}

/// Whether an `Init` asking for `asked` is taken by a node listening on `listen`: a node
/// reachable beyond loopback records open mode only with `--insecure-open`, whoever asks.
pub fn check_init(listen: SocketAddr, insecure_open: bool, asked: Mode) -> Result<(), ApiError> {
    if asked == Mode::Open && exposed(listen) && !insecure_open {
        return Err(ApiError::Conflict(format!(
            "this node listens on {listen}, beyond loopback, and open mode would let anyone who reaches it read and write everything: {HOW_TO_ENFORCE}; or start every node with --insecure-open (ENGRAM_INSECURE_OPEN=true) to accept that"
        )));
    }
    Ok(())
}

/// Why a node must not start, known before any request: it would record open mode itself
/// (`--bootstrap` without `--security enforced`), or its chain records open mode already,
/// while it listens beyond loopback without `--insecure-open`. Such a node could serve
/// neither its peers' forwarded calls nor any remote client.
pub fn refuse_at_start(
    listen: SocketAddr,
    insecure_open: bool,
    bootstraps_open: bool,
    recorded: Option<Mode>,
) -> Option<String> {
    if !exposed(listen) || insecure_open {
        return None;
    }
    let why = match recorded {
        Some(Mode::Open) => "its chain records open mode",
        Some(Mode::Enforced) => return None,
        None if bootstraps_open => {
            "--bootstrap would initialise the cluster in open mode (no --security enforced)"
        }
        None => return None,
    };
    Some(format!(
        "this node listens on {listen}, beyond loopback, and {why}: open mode serves loopback only. Listen on 127.0.0.1, or {HOW_TO_ENFORCE}, or pass --insecure-open (ENGRAM_INSECURE_OPEN=true) to let anyone who reaches the node read and write everything"
    ))
}

/// A client service behind [`check`]: refused calls never reach it.
#[derive(Clone)]
#[cfg_attr(madsim, allow(dead_code))] // the simulation's network carries its own clients only
pub struct Exposure<S> {
    inner: S,
    shared: Arc<Shared>,
}

#[cfg_attr(madsim, allow(dead_code))]
impl<S> Exposure<S> {
    pub fn new(inner: S, shared: Arc<Shared>) -> Exposure<S> {
        Exposure { inner, shared }
    }
}

#[cfg(not(madsim))]
mod service {
    use std::net::SocketAddr;
    use std::task::{Context, Poll};

    use futures::future::{Either, Ready, ready};
    use tonic::codegen::{Service, http};
    use tonic::server::NamedService;
    use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo};

    use super::Exposure;

    impl<S: NamedService> NamedService for Exposure<S> {
        const NAME: &'static str = S::NAME;
    }

    /// The caller's address, over plain TCP or TLS.
    fn peer(extensions: &http::Extensions) -> Option<SocketAddr> {
        extensions
            .get::<TcpConnectInfo>()
            .and_then(TcpConnectInfo::remote_addr)
            .or_else(|| {
                extensions
                    .get::<TlsConnectInfo<TcpConnectInfo>>()
                    .and_then(|info| info.get_ref().remote_addr())
            })
    }

    impl<S, B, R> Service<http::Request<B>> for Exposure<S>
    where
        S: Service<http::Request<B>, Response = http::Response<R>>,
        R: Default,
    {
        type Response = http::Response<R>;
        type Error = S::Error;
        type Future = Either<S::Future, Ready<Result<http::Response<R>, S::Error>>>;

        fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
            self.inner.poll_ready(cx)
        }

        fn call(&mut self, req: http::Request<B>) -> Self::Future {
            let peer = peer(req.extensions());
            // A loopback caller needs no look at the mode.
            let verdict = if peer.is_some_and(|p| super::is_loopback(p.ip())) {
                Ok(())
            } else {
                self.shared.security_mode().and_then(|mode| {
                    super::check(req.uri().path(), peer, mode, self.shared.config.insecure_open)
                })
            };
            match verdict {
                Ok(()) => Either::Left(self.inner.call(req)),
                Err(e) => Either::Right(ready(Ok(tonic::Status::from(e).into_http()))),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use tonic::Code;

    use super::*;

    fn addr(s: &str) -> SocketAddr {
        s.parse().expect("an address")
    }

    #[test]
    fn loopback_is_127_8_and_1_in_either_family() {
        for yes in ["127.0.0.1", "127.3.2.1", "::1", "::ffff:127.0.0.1"] {
            assert!(is_loopback(yes.parse().expect("ip")), "{yes}");
        }
        for no in [
            "0.0.0.0",
            "::",
            "10.0.0.7",
            "192.168.1.20",
            "172.17.0.1",
            "fe80::1",
            "::ffff:10.0.0.7",
            "2001:db8::1",
        ] {
            assert!(!is_loopback(no.parse().expect("ip")), "{no}");
        }
        assert!(exposed(addr("0.0.0.0:7001")));
        assert!(exposed(addr("[::]:7001")));
        assert!(!exposed(addr("127.0.0.1:7001")));
        assert!(!exposed(addr("[::1]:7001")));
    }

    fn code(r: Result<(), ApiError>) -> Option<Code> {
        r.err().map(|e| e.code())
    }

    #[test]
    fn open_mode_serves_loopback_and_enforced_serves_anyone() {
        let lan = Some(addr("10.0.0.7:51000"));
        let local = Some(addr("127.0.0.1:51000"));
        let get = "/engram.v1.Memory/Get";
        let add = "/engram.v1.Cluster/AddNode";
        for mode in [None, Some(Mode::Open), Some(Mode::Enforced)] {
            for flag in [false, true] {
                assert_eq!(code(check(get, local, mode, flag)), None);
                assert_eq!(code(check(add, local, mode, flag)), None);
                assert_eq!(code(check("/engram.v1.Cluster/Status", lan, mode, flag)), None);
                assert_eq!(code(check("/engram.v1.Cluster/Init", lan, mode, flag)), None);
            }
            assert_eq!(code(check(get, lan, Some(Mode::Enforced), false)), None);
        }
        // Data calls: only with --insecure-open; before the mode is recorded the refusal is
        // one a client retries.
        for (mode, refused) in [
            (None, Code::Unavailable),
            (Some(Mode::Open), Code::FailedPrecondition),
        ] {
            assert_eq!(code(check(get, lan, mode, false)), Some(refused));
            assert_eq!(code(check(get, None, mode, false)), Some(refused));
            assert_eq!(code(check(get, lan, mode, true)), None);
            // Membership, key and policy changes: never.
            for path in ADMIN_PATHS {
                for flag in [false, true] {
                    assert_eq!(
                        code(check(path, lan, mode, flag)),
                        Some(Code::PermissionDenied),
                        "{path}"
                    );
                }
            }
        }
        let message = check(add, lan, Some(Mode::Open), true).unwrap_err().to_string();
        assert!(message.contains("--security enforced --admin-key"), "{message}");
        let message = check(get, lan, Some(Mode::Open), false).unwrap_err().to_string();
        assert!(message.contains("--insecure-open"), "{message}");
        assert!(message.contains("10.0.0.7"), "{message}");
    }

    #[test]
    fn an_exposed_node_records_open_mode_only_when_told_to() {
        let any = addr("0.0.0.0:7001");
        let local = addr("127.0.0.1:7001");
        assert_eq!(code(check_init(any, false, Mode::Enforced)), None);
        assert_eq!(
            code(check_init(any, false, Mode::Open)),
            Some(Code::FailedPrecondition)
        );
        assert_eq!(code(check_init(any, true, Mode::Open)), None);
        assert_eq!(code(check_init(local, false, Mode::Open)), None);

        assert!(refuse_at_start(any, false, true, None).is_some());
        assert!(refuse_at_start(any, false, false, Some(Mode::Open)).is_some());
        assert!(
            refuse_at_start(any, false, false, None).is_none(),
            "waits to be initialised"
        );
        assert!(refuse_at_start(any, false, true, Some(Mode::Enforced)).is_none());
        assert!(refuse_at_start(any, true, true, Some(Mode::Open)).is_none());
        assert!(refuse_at_start(local, false, true, Some(Mode::Open)).is_none());
    }
}
