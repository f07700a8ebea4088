//! The proxy's access rules as pure functions: which clients may use it,
//! which resolved addresses it may connect to, which CONNECT ports are
//! open, and whether a `Proxy-Authorization` header carries valid
//! credentials. No I/O here; the connection code asks and acts.
//!
//! The defaults are squid's: CONNECT to 443 only, `http://` to squid's
//! `Safe_ports` only (`SAFE_PORTS`), no internal targets
//! (loopback, private, link-local, cloud metadata...), every client allowed
//! only because the listener is on loopback unless told otherwise.

use std::net::IpAddr;

use base64::Engine;
use ipnet::IpNet;
use sha1::Digest;
use subtle::ConstantTimeEq;

use super::auth::Check;

/// The ports squid's default `Safe_ports` list allows for plain
/// forwarding: http, ftp, https, gopher, wais, http-mgmt, gss-http,
/// filemaker, multiling http, and every unprivileged port. The rest are
/// services (smtp 25, ssh 22...) a browser's request has no business
/// reaching; refusing them keeps the proxy from being a relay for
/// cross-protocol requests.
const SAFE_PORTS: [std::ops::RangeInclusive<u16>; 10] = [
    80..=80,
    21..=21,
    443..=443,
    70..=70,
    210..=210,
    1025..=65535,
    280..=280,
    488..=488,
    591..=591,
    777..=777,
];

/// What the proxy allows; fixed for the life of a worker.
#[derive(Debug, Default)]
pub(crate) struct Policy {
    /// Ports CONNECT may reach besides 443.
    pub(crate) connect_ports: Vec<u16>,
    /// Ports `http://` requests may reach besides `SAFE_PORTS`.
    pub(crate) forward_ports: Vec<u16>,
    /// Connect to internal addresses too (tests, or a proxy for a private network).
    pub(crate) allow_private: bool,
    /// Client networks allowed; empty means every client.
    pub(crate) clients: Vec<IpNet>,
    /// Credentials; empty means no authentication.
    pub(crate) credentials: Vec<Credential>,
    /// A bcrypt hash of nothing anyone knows, at the cost of the file's
    /// hashes: an unknown user's password is checked against it, so the
    /// answer takes as long as for a known user (set when any credential
    /// is bcrypt).
    pub(crate) stand_in_hash: Option<String>,
}

/// What a request's credentials need before it may go on.
pub(crate) enum AuthCheck {
    Allowed,
    Refused,
    /// A bcrypt check, too slow for the loop (see `auth.rs`).
    Verify(Check),
}

/// Why a request is refused, with the status it gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// 403: the client's address is not allowed.
    Client,
    /// 407: missing or wrong credentials.
    Auth,
    /// 503: too many password checks in progress (see `auth.rs`).
    AuthBusy,
    /// 403: CONNECT to a port not allowed.
    Port,
    /// 403: an `http://` request to a port not allowed.
    ForwardPort,
    /// 403: the target resolves only to internal addresses.
    Private,
    /// 403: the Python policy hook said no.
    Hook,
    /// 403: the request came through this proxy already (its own `Via`).
    Loop,
}

impl Refusal {
    pub(crate) fn status(self) -> u16 {
        match self {
            Refusal::Auth => 407,
            Refusal::AuthBusy => 503,
            _ => 403,
        }
    }

    /// The one-line answer; a 403 names what would lift it, so that an
    /// operator reading a client's error knows which flag to reach for.
    pub(crate) fn message(self) -> &'static str {
        match self {
            Refusal::Client => "this client may not use the proxy (--allow-client CIDR admits it)",
            Refusal::Auth => "proxy authentication required",
            Refusal::AuthBusy => "too many password checks in progress; retry in a moment",
            Refusal::Port => {
                "CONNECT to this port is not allowed (--allow-connect-port PORT allows it)"
            }
            Refusal::ForwardPort => {
                "forwarding to this port is not allowed (--allow-port PORT allows it)"
            }
            Refusal::Private => "the target is an internal address (--allow-private allows it)",
            Refusal::Hook => {
                "refused by the proxy policy (the policy function given to rush.proxy.run)"
            }
            Refusal::Loop => {
                "forwarding loop: the request came through this proxy already (no flag lifts this)"
            }
        }
    }
}

impl Policy {
    pub(crate) fn allows_client(&self, client: IpAddr) -> bool {
        let client = canonical(client);
        self.clients.is_empty() || self.clients.iter().any(|net| net.contains(&client))
    }

    pub(crate) fn allows_connect_port(&self, port: u16) -> bool {
        port == 443 || self.connect_ports.contains(&port)
    }

    pub(crate) fn allows_forward_port(&self, port: u16) -> bool {
        SAFE_PORTS.iter().any(|range| range.contains(&port)) || self.forward_ports.contains(&port)
    }

    pub(crate) fn allows_address(&self, address: IpAddr) -> bool {
        self.allow_private || !is_internal(address)
    }

    /// Whether `header` (the value of `Proxy-Authorization`, if any) carries
    /// credentials that match one of ours, or the bcrypt check that decides.
    /// Every user name is compared (in constant time), and when bcrypt
    /// hashes are in use any other refusal waits for a check against the
    /// stand-in hash (which never passes), so the time taken does not tell
    /// which user names exist.
    pub(crate) fn check_credentials(&self, header: Option<&[u8]>) -> AuthCheck {
        if self.credentials.is_empty() {
            return AuthCheck::Allowed;
        }
        let Some((user, password)) = header.and_then(basic_credentials) else {
            return AuthCheck::Refused;
        };
        let user_digest = sha256(&user);
        let mut matched = false;
        let mut bcrypt_hash = None;
        for credential in &self.credentials {
            let (name, cheap_match) = match credential {
                Credential::Plain { user, digest } => {
                    (user, bool::from(sha256(&password).ct_eq(digest)))
                }
                Credential::Sha1 { user, digest } => {
                    let given: [u8; 20] = sha1::Sha1::digest(&password).into();
                    (user, bool::from(given.as_slice().ct_eq(digest.as_slice())))
                }
                Credential::Bcrypt { user, .. } => (user, false),
            };
            let same_user = bool::from(sha256(name).ct_eq(&user_digest));
            matched |= same_user & cheap_match;
            if let (true, Credential::Bcrypt { hash, .. }) = (same_user, credential) {
                bcrypt_hash.get_or_insert(hash);
            }
        }
        if matched {
            return AuthCheck::Allowed;
        }
        let digest = {
            let mut hasher = sha2::Sha256::new();
            hasher.update(&user);
            hasher.update(b":");
            hasher.update(&password);
            hasher.finalize().into()
        };
        let (hash, stand_in) = match (bcrypt_hash, &self.stand_in_hash) {
            (Some(hash), _) => (hash.clone(), false),
            // An unknown user, or a cheap credential that did not match:
            // as slow a no as a bcrypt user's.
            (None, Some(stand_in)) => (stand_in.clone(), true),
            _ => return AuthCheck::Refused,
        };
        AuthCheck::Verify(Check {
            digest,
            password,
            hash,
            stand_in,
        })
    }
}

/// The stand-in hash for `credentials` (see `Policy::stand_in_hash`), at
/// the cost of the first bcrypt credential. Its password does not matter:
/// a check against it is marked `stand_in` and never passes.
pub(crate) fn stand_in_hash(credentials: &[Credential]) -> Option<String> {
    let cost = credentials.iter().find_map(|credential| match credential {
        // `$2y$12$...`: the cost is the two digits after the prefix.
        Credential::Bcrypt { hash, .. } => hash.get(4..6)?.parse::<u32>().ok(),
        _ => None,
    })?;
    bcrypt::hash("stand-in", cost).ok()
}

/// An IPv4-mapped IPv6 address as the IPv4 address it is.
fn canonical(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(address, IpAddr::V4),
        v4 => v4,
    }
}

/// Whether `address` is one a proxy must not reach for outsiders:
/// loopback, unspecified, private (RFC 1918, RFC 4193), shared (RFC 6598),
/// link-local (which holds the cloud metadata service 169.254.169.254),
/// multicast, broadcast, reserved, and IPv6 forms that embed such an IPv4
/// address (mapped, NAT64 well-known prefix, 6to4).
pub(crate) fn is_internal(address: IpAddr) -> bool {
    match canonical(address) {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_multicast()
                || a == 0
                || (a == 100 && (64..128).contains(&b))
                || a >= 240
        }
        IpAddr::V6(v6) => {
            let segments = v6.segments();
            let embedded_v4 = |high: u16, low: u16| {
                is_internal(IpAddr::V4(std::net::Ipv4Addr::new(
                    (high >> 8) as u8,
                    high as u8,
                    (low >> 8) as u8,
                    low as u8,
                )))
            };
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || v6.is_unique_local()
                || v6.is_unicast_link_local()
                // 64:ff9b::/96, NAT64: the last 32 bits are an IPv4 address.
                || (segments[..6] == [0x64, 0xff9b, 0, 0, 0, 0] && embedded_v4(segments[6], segments[7]))
                // 2002::/16, 6to4: the next 32 bits are an IPv4 address.
                || (segments[0] == 0x2002 && embedded_v4(segments[1], segments[2]))
                // ::/96, the deprecated IPv4-compatible form.
                || (segments[..6] == [0; 6] && embedded_v4(segments[6], segments[7]))
        }
    }
}

/// `Basic <base64(user:password)>` as (user, password); `None` for any other scheme or bad encoding.
fn basic_credentials(header: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
    let header = header.trim_ascii();
    let space = header.iter().position(|&byte| byte == b' ')?;
    if !header[..space].eq_ignore_ascii_case(b"basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(header[space..].trim_ascii())
        .ok()?;
    let colon = decoded.iter().position(|&byte| byte == b':')?;
    Some((decoded[..colon].to_vec(), decoded[colon + 1..].to_vec()))
}

/// One user's credentials, from `--auth user:password` or an htpasswd line.
#[derive(Debug, Clone)]
pub(crate) enum Credential {
    /// A password given in the clear (`--auth`): kept as its SHA-256, and
    /// compared digest to digest in constant time, so neither the content
    /// nor the length of the password leaks through timing.
    Plain { user: Vec<u8>, digest: [u8; 32] },
    /// htpasswd `{SHA}` line: base64 of the password's SHA-1.
    Sha1 { user: Vec<u8>, digest: Vec<u8> },
    /// htpasswd bcrypt line (`$2y$`, `$2b$`, `$2a$`).
    Bcrypt { user: Vec<u8>, hash: String },
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    sha2::Sha256::digest(bytes).into()
}

impl Credential {
    /// `user:password` as given to `--auth`.
    pub(crate) fn plain(text: &str) -> Result<Credential, String> {
        let (user, password) = text
            .split_once(':')
            .filter(|(user, _)| !user.is_empty())
            .ok_or("--auth takes USER:PASSWORD")?;
        Ok(Credential::Plain {
            user: user.as_bytes().to_vec(),
            digest: sha256(password.as_bytes()),
        })
    }

    /// One htpasswd line (`user:{SHA}...` or `user:$2y$...`).
    pub(crate) fn htpasswd(line: &str) -> Result<Credential, String> {
        let (user, hash) = line
            .split_once(':')
            .filter(|(user, _)| !user.is_empty())
            .ok_or("an htpasswd line is USER:HASH")?;
        let user = user.as_bytes().to_vec();
        if let Some(encoded) = hash.strip_prefix("{SHA}") {
            let digest = base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .map_err(|_| {
                    format!(
                        "bad {{SHA}} hash for user {:?}",
                        String::from_utf8_lossy(&user)
                    )
                })?;
            return Ok(Credential::Sha1 { user, digest });
        }
        if ["$2y$", "$2b$", "$2a$"]
            .iter()
            .any(|prefix| hash.starts_with(prefix))
        {
            return Ok(Credential::Bcrypt {
                user,
                hash: hash.to_owned(),
            });
        }
        Err("only bcrypt ($2y$) and {SHA} htpasswd hashes are supported".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn internal_addresses() {
        for text in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "0.0.0.0",
            "100.64.0.1",
            "255.255.255.255",
            "224.0.0.1",
            "::1",
            "::",
            "fd00:ec2::254",
            "fe80::1",
            "::ffff:127.0.0.1",
            "64:ff9b::a00:1",
            "2002:7f00:1::",
            "::127.0.0.1",
        ] {
            assert!(is_internal(ip(text)), "{text}");
        }
        for text in [
            "93.184.215.14",
            "1.1.1.1",
            "2606:4700::1111",
            "::ffff:1.1.1.1",
            "64:ff9b::101:101",
        ] {
            assert!(!is_internal(ip(text)), "{text}");
        }
    }

    #[test]
    fn forward_ports_are_squids_safe_ports_unless_allowed() {
        let mut policy = Policy::default();
        for port in [80, 21, 443, 70, 210, 280, 488, 591, 777, 1025, 8080, 65535] {
            assert!(policy.allows_forward_port(port), "{port}");
        }
        for port in [0, 1, 22, 23, 25, 110, 143, 444, 1024] {
            assert!(!policy.allows_forward_port(port), "{port}");
        }
        policy.forward_ports.push(25);
        assert!(policy.allows_forward_port(25));
        assert!(!policy.allows_forward_port(22));
    }

    #[test]
    fn connect_ports_and_clients() {
        let mut policy = Policy::default();
        assert!(policy.allows_connect_port(443));
        assert!(!policy.allows_connect_port(22));
        policy.connect_ports.push(8443);
        assert!(policy.allows_connect_port(8443));
        assert!(policy.allows_client(ip("203.0.113.9")));
        policy.clients.push("10.0.0.0/8".parse().unwrap());
        assert!(policy.allows_client(ip("10.9.9.9")));
        assert!(policy.allows_client(ip("::ffff:10.9.9.9")));
        assert!(!policy.allows_client(ip("11.0.0.1")));
        assert!(!policy.allows_address(ip("10.0.0.1")));
        policy.allow_private = true;
        assert!(policy.allows_address(ip("10.0.0.1")));
    }

    fn basic(user_password: &str) -> Vec<u8> {
        let encoded = base64::engine::general_purpose::STANDARD.encode(user_password);
        format!("Basic {encoded}").into_bytes()
    }

    /// The decision, running a bcrypt check inline as the pool would.
    fn authorizes(policy: &Policy, header: Option<&[u8]>) -> bool {
        match policy.check_credentials(header) {
            AuthCheck::Allowed => true,
            AuthCheck::Refused => false,
            AuthCheck::Verify(check) => {
                !check.stand_in && bcrypt::verify(&check.password, &check.hash).unwrap()
            }
        }
    }

    #[test]
    fn basic_auth() {
        let mut policy = Policy::default();
        assert!(authorizes(&policy, None));
        policy
            .credentials
            .push(Credential::plain("alice:s3cret").unwrap());
        // htpasswd -s: {SHA} of "pw".
        policy
            .credentials
            .push(Credential::htpasswd("bob:{SHA}GpHWL3ymc5liWkNopqtdSjuqYHM=").unwrap());
        policy.credentials.push(
            Credential::htpasswd(&format!("carol:{}", bcrypt::hash("pass", 4).unwrap())).unwrap(),
        );
        policy.stand_in_hash = stand_in_hash(&policy.credentials);
        assert!(authorizes(&policy, Some(&basic("alice:s3cret"))));
        assert!(authorizes(&policy, Some(b"basic   YWxpY2U6czNjcmV0  ")));
        assert!(authorizes(&policy, Some(&basic("bob:pw"))));
        assert!(authorizes(&policy, Some(&basic("carol:pass"))));
        for wrong in [
            "alice:s3cre",
            "alice:s3cret2",
            "bob:s3cret",
            "eve:s3cret",
            "alice",
            "",
        ] {
            assert!(!authorizes(&policy, Some(&basic(wrong))), "{wrong}");
        }
        assert!(!authorizes(&policy, None));
        assert!(!authorizes(&policy, Some(b"Bearer abc")));
        assert!(!authorizes(&policy, Some(b"Basic !!!")));
        assert!(Credential::plain("nopassword").is_err());
        assert!(Credential::htpasswd("dave:$apr1$x$y").is_err());
    }

    #[test]
    fn bcrypt_and_unknown_users_go_to_the_pool_and_cheap_ones_do_not() {
        let mut policy = Policy::default();
        policy
            .credentials
            .push(Credential::plain("alice:s3cret").unwrap());
        let carol = bcrypt::hash("pass", 5).unwrap();
        policy
            .credentials
            .push(Credential::htpasswd(&format!("carol:{carol}")).unwrap());
        policy.stand_in_hash = stand_in_hash(&policy.credentials);
        // The stand-in costs what the file's hashes cost.
        assert!(policy
            .stand_in_hash
            .as_ref()
            .unwrap()
            .starts_with("$2b$05$"));
        assert!(matches!(
            policy.check_credentials(Some(&basic("alice:s3cret"))),
            AuthCheck::Allowed
        ));
        // A cheap user's wrong password waits for a stand-in check too: as
        // slow a no as any other.
        assert!(matches!(
            policy.check_credentials(Some(&basic("alice:nope"))),
            AuthCheck::Verify(Check { stand_in: true, .. })
        ));
        assert!(matches!(policy.check_credentials(None), AuthCheck::Refused));
        let AuthCheck::Verify(known) = policy.check_credentials(Some(&basic("carol:guess"))) else {
            panic!("a bcrypt user is checked off the loop");
        };
        assert!(!known.stand_in && known.hash == carol);
        // An unknown user costs one bcrypt check too, which never passes
        // (not even with the stand-in's own password).
        let AuthCheck::Verify(unknown) = policy.check_credentials(Some(&basic("eve:stand-in")))
        else {
            panic!("an unknown user is checked against the stand-in");
        };
        assert!(unknown.stand_in);
        assert!(!authorizes(&policy, Some(&basic("eve:stand-in"))));
        // The cache key tells users and passwords apart.
        assert_ne!(known.digest, unknown.digest);
    }
}
