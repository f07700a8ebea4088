//! Endpoints of one server sharing a secret (tests/support): a worker that
//! does not know a connection resets it statelessly, and the client takes
//! the reset only when the secret is the one its connection was made with.

mod support;

use rush_h3::quinn_proto::ConnectionError;
use rush_h3::{EndpointSecret, H3Settings};
use support::H3Endpoint;
use support::{get, request, settings, Net};

/// Serves one request on an endpoint with `first`, then sends the client's
/// next request to a fresh endpoint with `second` (a restarted worker, or
/// another one), and returns how the client's connection ended.
fn next_packet_reaches_another_worker(
    first: Option<EndpointSecret>,
    second: Option<EndpointSecret>,
) -> ConnectionError {
    let mut net = Net::new(H3Settings {
        secret: first,
        ..settings()
    });
    let (client, _closed) = net.h3_client();
    let first_answer = request(&mut net, &client, get("/"), vec![], None);
    net.run_until(|net| {
        net.answer_requests(b"hi");
        first_answer.borrow().is_some()
    });
    net.settle();
    net.server = H3Endpoint::new(
        net.server_tls.clone(),
        H3Settings {
            secret: second,
            ..settings()
        },
    )
    .unwrap();
    let quic = net.clients.values().next().unwrap().clone();
    let _second_answer = request(&mut net, &client, get("/again"), vec![], None);
    net.run_until(|net| {
        net.answer_requests(b"hi");
        quic.lost().is_some()
    });
    quic.lost().unwrap()
}

#[test]
fn a_worker_with_the_same_secret_resets_a_connection_it_does_not_know() {
    let secret = EndpointSecret([7; 32]);
    let lost = next_packet_reaches_another_worker(Some(secret.clone()), Some(secret));
    assert!(matches!(lost, ConnectionError::Reset), "{lost:?}");
}

#[test]
fn without_a_shared_secret_the_reset_is_not_recognised() {
    // Keys random to each endpoint, as without the setting: the client
    // cannot tell the reset from noise and waits out its idle timeout.
    let lost = next_packet_reaches_another_worker(None, None);
    assert!(matches!(lost, ConnectionError::TimedOut), "{lost:?}");
    let lost = next_packet_reaches_another_worker(
        Some(EndpointSecret([1; 32])),
        Some(EndpointSecret([2; 32])),
    );
    assert!(matches!(lost, ConnectionError::TimedOut), "{lost:?}");
}

/// A client sent a Retry by one endpoint comes back with its token to
/// another (another worker); returns whether it got connected, and that
/// endpoint's counters.
fn retry_token_taken_by_another_worker(
    first: EndpointSecret,
    second: EndpointSecret,
) -> (bool, rush_h3::EndpointStats) {
    let always_retry = |secret| H3Settings {
        secret: Some(secret),
        retry_above_unvalidated: 0,
        ..settings()
    };
    let mut net = Net::new(always_retry(first));
    let quic = net.connect();
    // One turn: the Initial goes to the first endpoint, its Retry comes back.
    net.turn();
    assert_eq!(net.server.stats().retries, 1);
    net.server = H3Endpoint::new(net.server_tls.clone(), always_retry(second)).unwrap();
    net.run_until(|_| quic.is_connected() || quic.lost().is_some());
    (quic.is_connected(), net.server.stats())
}

#[test]
fn a_retry_token_is_good_at_any_worker_with_the_same_secret() {
    let (connected, stats) =
        retry_token_taken_by_another_worker(EndpointSecret([3; 32]), EndpointSecret([3; 32]));
    assert!(connected);
    assert_eq!((stats.retries, stats.accepted), (0, 1));
    let (connected, stats) =
        retry_token_taken_by_another_worker(EndpointSecret([3; 32]), EndpointSecret([4; 32]));
    assert!(!connected, "a token sealed with another key is refused");
    assert_eq!(stats.accepted, 0);
}
