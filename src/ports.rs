//! A task's port scope (`tasks.ports`): an nmap port list read into the endpoints it
//! covers, which is what a close run may close.
//!
//! As in nmap (`-p`), a `T:`, `U:` or `S:` qualifier applies to the ports after it until the
//! next one. Ports before any qualifier are read as TCP: nmap applies them to whichever
//! protocols the scan used, which the scope alone cannot tell, and a close must never reach
//! a protocol that was not scanned. The syntax is the one `port_scope_is_valid()` checks in
//! the database; anything else is refused here too.

use std::fmt;

/// A transport an endpoint is observed on (`transport` in documents).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Transport {
    Tcp,
    Udp,
    Sctp,
}

impl Transport {
    /// The transport named `name` as documents write it (`tcp`, `udp`, `sctp`).
    pub fn from_name(name: &str) -> Option<Transport> {
        match name {
            "tcp" => Some(Transport::Tcp),
            "udp" => Some(Transport::Udp),
            "sctp" => Some(Transport::Sctp),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Tcp => "tcp",
            Transport::Udp => "udp",
            Transport::Sctp => "sctp",
        }
    }
}

/// Ports `first..=last` on one transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortRange {
    pub transport: Transport,
    pub first: u16,
    pub last: u16,
}

/// A parsed scope: its ranges in the order written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortScope(pub Vec<PortRange>);

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadScope(String);

impl fmt::Display for BadScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}; a port scope is an nmap port list such as 22,80,443 or 1-1024 or U:53,T:1-1000",
            self.0
        )
    }
}

/// The longest scope taken, as in the database's check.
const MAX_LEN: usize = 1024;

impl PortScope {
    pub fn parse(text: &str) -> Result<PortScope, BadScope> {
        if text.len() > MAX_LEN {
            return Err(BadScope(format!("longer than {MAX_LEN} characters")));
        }
        let mut transport = Transport::Tcp;
        let mut ranges = Vec::new();
        for item in text.split(',') {
            let ports = match item.split_once(':') {
                Some((q, rest)) => {
                    transport = match q {
                        "T" => Transport::Tcp,
                        "U" => Transport::Udp,
                        "S" => Transport::Sctp,
                        _ => return Err(BadScope(format!("unknown qualifier {q:?}"))),
                    };
                    rest
                }
                None => item,
            };
            let (first, last) = match ports.split_once('-') {
                Some((a, b)) => (port(a)?, port(b)?),
                None => (port(ports)?, port(ports)?),
            };
            if last < first {
                return Err(BadScope(format!("descending range {first}-{last}")));
            }
            ranges.push(PortRange {
                transport,
                first,
                last,
            });
        }
        Ok(PortScope(ranges))
    }

    /// Whether the scope covers the port on the transport.
    pub fn covers(&self, transport: Transport, port: u16) -> bool {
        self.0
            .iter()
            .any(|r| r.transport == transport && (r.first..=r.last).contains(&port))
    }
}

/// One port number: 1 to 5 digits, at most 65535.
fn port(text: &str) -> Result<u16, BadScope> {
    if text.is_empty() || text.len() > 5 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(BadScope(format!("{text:?} is not a port number")));
    }
    text.parse()
        .map_err(|_| BadScope(format!("{text} is above 65535")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transports_by_name() {
        assert_eq!(Transport::from_name("udp"), Some(Transport::Udp));
        assert_eq!(Transport::from_name("TCP"), None);
        assert_eq!(Transport::from_name("icmp"), None);
    }

    fn r(transport: Transport, first: u16, last: u16) -> PortRange {
        PortRange {
            transport,
            first,
            last,
        }
    }

    #[test]
    fn qualifiers_last_until_the_next_one_and_bare_ports_are_tcp() {
        // nmap's own example: "-p U:53,111,137,T:21-25,80,139,8080".
        let s = PortScope::parse("U:53,111,137,T:21-25,80,139,8080").unwrap();
        assert_eq!(s.0[1], r(Transport::Udp, 111, 111));
        assert_eq!(s.0[3], r(Transport::Tcp, 21, 25));
        assert_eq!(s.0[6], r(Transport::Tcp, 8080, 8080));
        assert!(s.covers(Transport::Udp, 137) && !s.covers(Transport::Tcp, 137));
        let bare = PortScope::parse("22,0-10,S:9").unwrap();
        assert_eq!(
            bare.0,
            vec![
                r(Transport::Tcp, 22, 22),
                r(Transport::Tcp, 0, 10),
                r(Transport::Sctp, 9, 9)
            ]
        );
        assert!(PortScope::parse("1-65535")
            .unwrap()
            .covers(Transport::Tcp, 65535));
    }

    #[test]
    fn what_the_database_refuses_is_refused() {
        for bad in [
            "", "22,", ",22", "http", "-100", "1-", "5-1", "65536", "123456", "X:1", "T:", "1 ,2",
            "T:U:1",
        ] {
            assert!(PortScope::parse(bad).is_err(), "{bad:?}");
        }
        assert!(PortScope::parse(&"1,".repeat(600)).is_err());
    }
}
