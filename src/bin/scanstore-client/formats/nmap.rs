//! nmap's XML output (`-oX`, nmap.dtd), read one `<host>` at a time: its address and
//! names, its OS guesses, and every port nmap lists with its state, service, CPEs and
//! script output.

use std::io::BufRead;
use std::net::IpAddr;

use quick_xml::events::{BytesStart, Event};
use quick_xml::{Reader, XmlVersion};

use scanstore::upload::details::{Hostname, NameSource, PortState, Script};

use super::{Source, Unit};
use crate::error::Error;
use crate::observation::{
    address_record, endpoint, host, hostnames, Observation, Service, Time, Transport,
};

pub struct NmapXml {
    name: String,
    reader: Reader<Box<dyn BufRead + Send>>,
    /// Offset of the reader's first byte in the input.
    base: u64,
    /// `<nmaprun start>`: the time of a host that carries none of its own.
    run_start: Option<Time>,
    buf: Vec<u8>,
}

#[derive(Default)]
struct HostDraft {
    offset: u64,
    start: Option<Time>,
    end: Option<Time>,
    ip: Option<IpAddr>,
    /// Hostnames and whether each is the user's (else a PTR record's).
    names: Vec<(String, bool)>,
    /// OS guesses: name and accuracy.
    os: Vec<(String, u8)>,
    ports: Vec<PortDraft>,
    port: Option<PortDraft>,
}

#[derive(Default)]
struct PortDraft {
    transport: Option<Transport>,
    port: Option<u16>,
    state: Option<PortState>,
    service: Option<String>,
    /// `ssl` when nmap reached the service through TLS.
    tunnel: Option<String>,
    product: Option<String>,
    version: Option<String>,
    extra_info: Option<String>,
    confidence: Option<u8>,
    cpe: Vec<String>,
    /// Inside `<service><cpe>`: its text is a CPE.
    in_cpe: bool,
    scripts: Vec<Script>,
    banner: Option<String>,
}

fn attr(e: &BytesStart<'_>, key: &str) -> Option<String> {
    let a = e.try_get_attribute(key).ok()??;
    a.normalized_value(XmlVersion::Implicit1_0)
        .ok()
        .map(|v| v.into_owned())
}

fn time_attr(e: &BytesStart<'_>, key: &str) -> Option<Time> {
    attr(e, key).and_then(|t| Time::from_epoch(&t))
}

impl NmapXml {
    /// A reader of a whole document as it arrives (nmap's standard output).
    pub fn new(name: &str, input: Box<dyn BufRead + Send>) -> NmapXml {
        NmapXml::at(name, input, 0, None)
    }

    fn at(
        name: &str,
        input: Box<dyn BufRead + Send>,
        base: u64,
        run_start: Option<Time>,
    ) -> NmapXml {
        let mut reader = Reader::from_reader(input);
        let config = reader.config_mut();
        config.trim_text(true);
        // A resumed read starts between hosts and so meets `</nmaprun>` unopened.
        config.check_end_names = false;
        config.allow_unmatched_ends = true;
        NmapXml {
            name: name.to_string(),
            reader,
            base,
            run_start,
            buf: Vec::new(),
        }
    }

    /// A reader that starts at the host at `offset` of a file: `header` reads the file
    /// from its start, for `<nmaprun start>`; `body` from `offset`.
    pub fn resume(
        name: &str,
        header: Box<dyn BufRead + Send>,
        body: Box<dyn BufRead + Send>,
        offset: u64,
    ) -> Result<NmapXml, Error> {
        if offset == 0 {
            return Ok(NmapXml::new(name, body));
        }
        let mut head = NmapXml::new(name, header);
        loop {
            head.buf.clear();
            match head.reader.read_event_into(&mut head.buf) {
                Ok(Event::Start(e) | Event::Empty(e)) if e.local_name().as_ref() == b"nmaprun" => {
                    let start = time_attr(&e, "start");
                    return Ok(NmapXml::at(name, body, offset, start));
                }
                Ok(Event::Eof) => {
                    return Err(Error::Input(format!("{name}: no <nmaprun> element")))
                }
                Ok(_) => {}
                Err(e) => return Err(Error::Input(format!("{name}: {e}"))),
            }
        }
    }
}

impl Source for NmapXml {
    fn next_unit(&mut self) -> Result<Option<Unit>, Error> {
        let mut host: Option<HostDraft> = None;
        loop {
            let at = self.base + self.reader.buffer_position();
            self.buf.clear();
            let event = self
                .reader
                .read_event_into(&mut self.buf)
                .map_err(|e| Error::Input(format!("{}: byte {at}: {e}", self.name)))?;
            match event {
                Event::Start(e) | Event::Empty(e) => {
                    let tag = e.local_name();
                    match (tag.as_ref(), host.as_mut()) {
                        (b"nmaprun", _) => self.run_start = time_attr(&e, "start"),
                        (b"host", _) => {
                            host = Some(HostDraft {
                                offset: at,
                                start: time_attr(&e, "starttime"),
                                end: time_attr(&e, "endtime"),
                                ..HostDraft::default()
                            })
                        }
                        (b"address", Some(h)) => {
                            let family = attr(&e, "addrtype");
                            if h.ip.is_none() && matches!(family.as_deref(), Some("ipv4" | "ipv6"))
                            {
                                h.ip = attr(&e, "addr").and_then(|a| a.parse().ok());
                            }
                        }
                        (b"hostname", Some(h)) => {
                            let user = attr(&e, "type").as_deref() == Some("user");
                            h.names.extend(attr(&e, "name").map(|n| (n, user)));
                        }
                        (b"osmatch", Some(h)) => {
                            let accuracy = attr(&e, "accuracy").and_then(|a| a.parse().ok());
                            if let (Some(name), Some(accuracy)) = (attr(&e, "name"), accuracy) {
                                h.os.push((name, accuracy));
                            }
                        }
                        (b"port", Some(h)) => {
                            h.port = Some(PortDraft {
                                transport: attr(&e, "protocol").and_then(|p| Transport::parse(&p)),
                                port: attr(&e, "portid").and_then(|p| p.parse().ok()),
                                ..PortDraft::default()
                            })
                        }
                        (b"state", Some(HostDraft { port: Some(p), .. })) => {
                            p.state = attr(&e, "state").and_then(|s| PortState::parse(&s));
                        }
                        (b"service", Some(HostDraft { port: Some(p), .. })) => {
                            p.service = attr(&e, "name");
                            p.tunnel = attr(&e, "tunnel");
                            p.product = attr(&e, "product");
                            p.version = attr(&e, "version");
                            p.extra_info = attr(&e, "extrainfo");
                            p.confidence = attr(&e, "conf").and_then(|c| c.parse().ok());
                        }
                        (b"cpe", Some(HostDraft { port: Some(p), .. })) => p.in_cpe = true,
                        (b"script", Some(HostDraft { port: Some(p), .. })) => {
                            if let (Some(id), Some(output)) = (attr(&e, "id"), attr(&e, "output")) {
                                if id == "banner" {
                                    p.banner = Some(output.clone());
                                }
                                p.scripts.push(Script { id, output });
                            }
                        }
                        _ => {}
                    }
                }
                Event::Text(t) => {
                    if let Some(HostDraft { port: Some(p), .. }) = host.as_mut() {
                        if p.in_cpe {
                            if let Ok(text) = t.decode() {
                                p.cpe.push(text.trim().to_string());
                            }
                        }
                    }
                }
                Event::End(e) => match (e.local_name().as_ref(), host.as_mut()) {
                    (b"cpe", Some(HostDraft { port: Some(p), .. })) => p.in_cpe = false,
                    (b"port", Some(h)) => h.ports.extend(h.port.take()),
                    (b"host", Some(_)) => {
                        if let Some(h) = host.take() {
                            return self.unit(h).map(Some);
                        }
                    }
                    _ => {}
                },
                Event::Eof => {
                    if host.is_some() {
                        log::warn!(
                            "{}: the input ends inside a <host>; that host is not imported",
                            self.name
                        );
                    }
                    return Ok(None);
                }
                _ => {}
            }
        }
    }

    fn position(&self) -> u64 {
        self.base + self.reader.buffer_position()
    }
}

impl NmapXml {
    fn unit(&self, h: HostDraft) -> Result<Unit, Error> {
        let Some(ip) = h.ip else {
            // A host known only by its MAC address reports no endpoint.
            return Ok(Unit {
                offset: h.offset,
                host: None,
                observations: Vec::new(),
            });
        };
        let at = h.end.or(h.start).or(self.run_start).ok_or_else(|| {
            Error::Input(format!(
                "{}: byte {}: a host without a time, in a run without a start time",
                self.name, h.offset
            ))
        })?;
        let names: Vec<Hostname> = hostnames(h.names.iter().map(|(n, user)| {
            let source = if *user {
                NameSource::User
            } else {
                NameSource::Ptr
            };
            (n.as_str(), source)
        }));
        // The user's names as address records first: they put the address in a domain
        // target's scope.
        let mut observations: Vec<Observation> = h
            .names
            .iter()
            .filter(|(_, user)| *user)
            .filter_map(|(n, _)| address_record(n, ip, at))
            .collect();
        observations.extend(host(ip, &h.os, &names, at));
        for p in &h.ports {
            let (Some(transport), Some(port)) = (p.transport, p.port.filter(|p| *p > 0)) else {
                continue;
            };
            let service = Service {
                name: p.service.as_deref(),
                product: p.product.as_deref(),
                version: p.version.as_deref(),
                banner: p.banner.as_deref(),
                state: p.state,
                hostnames: &names,
                cpe: &p.cpe,
                extra_info: p.extra_info.as_deref(),
                tunnel: p.tunnel.as_deref(),
                confidence: p.confidence,
                scripts: &p.scripts,
            };
            observations.push(endpoint(ip, port, transport, service, at));
        }
        Ok(Unit {
            offset: h.offset,
            host: Some(ip),
            observations,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RUN: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE nmaprun>
<?xml-stylesheet href="file:///usr/bin/../share/nmap/nmap.xsl" type="text/xsl"?>
<nmaprun scanner="nmap" args="nmap -sV -oX - localhost" start="1764410400" startstr="Sat Nov 29 10:00:00 2025" version="7.93" xmloutputversion="1.05">
<scaninfo type="connect" protocol="tcp" numservices="2" services="22,80"/>
<verbose level="0"/>
<debugging level="0"/>
<hosthint><status state="up" reason="unknown-response" reason_ttl="0"/>
<address addr="192.0.2.99" addrtype="ipv4"/>
<hostnames>
</hostnames>
</hosthint>
<host starttime="1764410401" endtime="1764410460"><status state="up" reason="conn-refused" reason_ttl="0"/>
<address addr="192.0.2.1" addrtype="ipv4"/>
<hostnames>
<hostname name="www.example.com" type="user"/>
<hostname name="ptr.example.net" type="PTR"/>
</hostnames>
<ports><extraports state="closed" count="998">
<extrareasons reason="conn-refused" count="998" proto="tcp" ports="1-21,23-79"/>
</extraports>
<port protocol="tcp" portid="22"><state state="open" reason="syn-ack" reason_ttl="0"/><service name="ssh" product="OpenSSH" version="8.9p1 Ubuntu 3ubuntu0.10" extrainfo="Ubuntu Linux; protocol 2.0" ostype="Linux" method="probed" conf="10"><cpe>cpe:/a:openbsd:openssh:8.9p1</cpe><cpe>cpe:/o:linux:linux_kernel</cpe></service><script id="banner" output="SSH-2.0-OpenSSH_8.9p1 Ubuntu-3ubuntu0.10"/></port>
<port protocol="tcp" portid="80"><state state="filtered" reason="no-response" reason_ttl="0"/><service name="http" method="table" conf="3"/></port>
</ports>
<os><portused state="open" proto="tcp" portid="22"/>
<osmatch name="Linux 5.0 - 5.14" accuracy="98" line="67000">
<osclass type="general purpose" vendor="Linux" osfamily="Linux" osgen="5.X" accuracy="98"><cpe>cpe:/o:linux:linux_kernel:5</cpe></osclass>
</osmatch>
</os>
<times srtt="52" rttvar="21" to="100000"/>
</host>
<host><status state="up" reason="arp-response" reason_ttl="0"/>
<address addr="00:11:22:33:44:55" addrtype="mac"/>
</host>
<host starttime="1764410401" endtime="1764410470"><status state="up" reason="echo-reply" reason_ttl="0"/>
<address addr="2001:db8::7" addrtype="ipv6"/>
<ports><port protocol="udp" portid="53"><state state="open" reason="udp-response" reason_ttl="64"/><service name="domain" product="dnsmasq" version="2.90" tunnel="ssl" method="probed" conf="10"/><script id="dns-nsid" output="&#xa;  bind.version: dnsmasq-2.90"/></port>
</ports>
</host>
<runstats><finished time="1764410480" timestr="Sat Nov 29 10:01:20 2025" summary="Nmap done" elapsed="80.00" exit="success"/><hosts up="3" down="0" total="3"/>
</runstats>
</nmaprun>
"#;

    fn all(source: &mut dyn Source) -> Vec<Unit> {
        std::iter::from_fn(|| source.next_unit().unwrap()).collect()
    }

    fn json(u: &Unit) -> Vec<serde_json::Value> {
        u.observations
            .iter()
            .map(|o| serde_json::to_value(o).unwrap())
            .collect()
    }

    #[test]
    fn hosts_become_units_of_their_ports() {
        let mut x = NmapXml::new("run.xml", Box::new(RUN.as_bytes()));
        let units = all(&mut x);
        assert_eq!(units.len(), 3);
        let first = json(&units[0]);
        // The user's name for the host as an address record, the host with its names and
        // OS guess, then both ports; the hosthint is not a host.
        assert_eq!(first.len(), 4, "{first:?}");
        assert_eq!(first[0]["name"], "www.example.com");
        assert_eq!(first[0]["value"], "192.0.2.1");
        assert_eq!(first[1]["type"], "host");
        assert_eq!(
            first[1]["os"],
            serde_json::json!([{"name": "Linux 5.0 - 5.14", "accuracy": 98}])
        );
        assert_eq!(
            first[1]["hostnames"],
            serde_json::json!([
                {"name": "www.example.com", "source": "user"},
                {"name": "ptr.example.net", "source": "ptr"}
            ])
        );
        let ssh = &first[2];
        assert_eq!(ssh["port"], 22);
        assert!(ssh.get("state").is_none(), "open is sent as no state");
        assert_eq!(ssh["service"], "ssh");
        assert_eq!(ssh["product"], "OpenSSH");
        assert_eq!(ssh["version"], "8.9p1 Ubuntu 3ubuntu0.10");
        assert_eq!(ssh["extra_info"], "Ubuntu Linux; protocol 2.0");
        assert_eq!(ssh["confidence"], 10);
        assert_eq!(
            ssh["cpe"],
            serde_json::json!(["cpe:/a:openbsd:openssh:8.9p1", "cpe:/o:linux:linux_kernel"])
        );
        assert_eq!(ssh["banner"], "SSH-2.0-OpenSSH_8.9p1 Ubuntu-3ubuntu0.10");
        assert_eq!(ssh["scripts"][0]["id"], "banner");
        assert_eq!(ssh["hostnames"], first[1]["hostnames"]);
        assert_eq!(ssh["observed_at"], "2025-11-29T10:01:00.000Z");
        assert_eq!(first[3]["port"], 80);
        assert_eq!(first[3]["state"], "filtered");
        assert!(units[1].observations.is_empty() && units[1].host.is_none());
        let third = json(&units[2]);
        assert_eq!(
            (third[0]["transport"].as_str(), third[0]["ip"].as_str()),
            (Some("udp"), Some("2001:db8::7"))
        );
        assert!(third[0].get("banner").is_none());
        assert_eq!(
            third[0]["scripts"][0]["output"],
            "bind.version: dnsmasq-2.90"
        );
        assert_eq!(third[0]["tunnel"], "ssl");
    }

    #[test]
    fn a_read_resumed_at_a_host_offset_yields_the_same_units() {
        let whole = all(&mut NmapXml::new("run.xml", Box::new(RUN.as_bytes())));
        let offset = whole[2].offset as usize;
        assert!(RUN[offset..].trim_start().starts_with("<host "));
        let mut resumed = NmapXml::resume(
            "run.xml",
            Box::new(RUN.as_bytes()),
            Box::new(&RUN.as_bytes()[offset..]),
            offset as u64,
        )
        .unwrap();
        let rest = all(&mut resumed);
        assert_eq!(rest.len(), 1);
        assert_eq!(rest[0].offset, whole[2].offset);
        assert_eq!(json(&rest[0]), json(&whole[2]));
    }

    #[test]
    fn a_host_without_any_time_is_refused_and_a_truncated_host_dropped() {
        let no_time = RUN
            .replace(r#" start="1764410400""#, "")
            .replace(r#"starttime="1764410401" endtime="1764410460""#, "");
        let mut x = NmapXml::new(
            "run.xml",
            Box::new(std::io::Cursor::new(no_time.into_bytes())),
        );
        assert!(matches!(x.next_unit(), Err(Error::Input(m)) if m.contains("without a time")));
        let cut = &RUN[..RUN.find("<times").unwrap()];
        assert!(all(&mut NmapXml::new("cut.xml", Box::new(cut.as_bytes()))).is_empty());
    }
}
