//! The principal a client's TLS certificate names.
//!
//! With mutual TLS, the transport has already checked the client's certificate chain against
//! the cluster's client CA; what is left is to read whom it names. An Engram principal is:
//!
//! 1. the name after `engram:agent:` in a URI subject-alternative name (`URI:engram:agent:alice`),
//!    so a certificate can name its agent while its subject stays a host or service name; or,
//!    without such a name,
//! 2. the subject's common name (`CN=alice`), as etcd reads a client certificate.
//!
//! A certificate naming two agents (two such URIs, or two CNs and no URI) names none: it is
//! refused rather than guessed. Only what is needed is read — a small DER walker over the
//! certificate's subject and extensions, bounds-checked at every step — so no X.509 library is
//! pulled in for two fields of a certificate the TLS stack has already verified.

use crate::policy::{Principal, PrincipalError};

/// The URI scheme and path prefix of a subject-alternative name that names an agent.
pub const AGENT_URI_PREFIX: &str = "engram:agent:";

/// Why a certificate names no principal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CertError {
    #[error("the certificate is not valid DER: {0}")]
    Malformed(&'static str),
    #[error("the certificate names more than one agent ({0} and {1})")]
    Ambiguous(String, String),
    #[error("the certificate's name is not a valid principal: {0}")]
    BadName(#[from] PrincipalError),
}

/// The principal DER certificate `der` names (see the module docs); `None` if it names none.
pub fn principal_of(der: &[u8]) -> Result<Option<Principal>, CertError> {
    let names = names_of(der)?;
    let chosen = match (names.agent_uris.as_slice(), names.common_names.as_slice()) {
        ([uri], _) => uri,
        ([a, b, ..], _) => return Err(CertError::Ambiguous(a.clone(), b.clone())),
        ([], [cn]) => cn,
        ([], [a, b, ..]) => return Err(CertError::Ambiguous(a.clone(), b.clone())),
        ([], []) => return Ok(None),
    };
    Ok(Some(Principal::new(chosen.clone())?))
}

/// The names of a certificate that may name an agent.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct CertNames {
    /// The subject's common names, in order.
    pub common_names: Vec<String>,
    /// What follows [`AGENT_URI_PREFIX`] in each URI subject-alternative name that has it.
    pub agent_uris: Vec<String>,
}

const SEQUENCE: u8 = 0x30;
const SET: u8 = 0x31;
const OID: u8 = 0x06;
const OCTET_STRING: u8 = 0x04;
const BOOLEAN: u8 = 0x01;
const VERSION: u8 = 0xA0;
const ISSUER_UID: u8 = 0x81;
const SUBJECT_UID: u8 = 0x82;
const EXTENSIONS: u8 = 0xA3;
const SAN_URI: u8 = 0x86;
/// 2.5.4.3, id-at-commonName.
const CN_OID: &[u8] = &[0x55, 0x04, 0x03];
/// 2.5.29.17, id-ce-subjectAltName.
const SAN_OID: &[u8] = &[0x55, 0x1D, 0x11];

/// Reads the subject's common names and the agent URIs of certificate `der`.
pub fn names_of(der: &[u8]) -> Result<CertNames, CertError> {
    let mut outer = Der::new(der);
    let cert = outer.expect(SEQUENCE, "certificate")?;
    if !outer.is_empty() {
        return Err(CertError::Malformed("bytes after the certificate"));
    }
    let mut cert = Der::new(cert);
    let mut tbs = Der::new(cert.expect(SEQUENCE, "tbsCertificate")?);
    if tbs.peek() == Some(VERSION) {
        tbs.next()?;
    }
    for what in ["serialNumber", "signature", "issuer", "validity"] {
        tbs.any(what)?;
    }
    let subject = tbs.expect(SEQUENCE, "subject")?;
    tbs.expect(SEQUENCE, "subjectPublicKeyInfo")?;
    let mut names = CertNames {
        common_names: common_names(subject)?,
        agent_uris: Vec::new(),
    };
    while let Some(tag) = tbs.peek() {
        let (_, body) = tbs.next()?;
        match tag {
            ISSUER_UID | SUBJECT_UID => {}
            EXTENSIONS => names.agent_uris = agent_uris(body)?,
            _ => return Err(CertError::Malformed("unexpected field in tbsCertificate")),
        }
    }
    Ok(names)
}

fn common_names(subject: &[u8]) -> Result<Vec<String>, CertError> {
    let mut names = Vec::new();
    let mut rdns = Der::new(subject);
    while !rdns.is_empty() {
        let mut set = Der::new(rdns.expect(SET, "relative distinguished name")?);
        while !set.is_empty() {
            let mut attribute = Der::new(set.expect(SEQUENCE, "attribute")?);
            let oid = attribute.expect(OID, "attribute type")?;
            let (tag, value) = attribute.next()?;
            if oid == CN_OID {
                names.push(directory_string(tag, value)?);
            }
        }
    }
    Ok(names)
}

/// A common name's value: UTF8String, PrintableString or IA5String (the forms certificate
/// tools write); other string forms are refused rather than mis-read.
fn directory_string(tag: u8, value: &[u8]) -> Result<String, CertError> {
    match tag {
        0x0C | 0x13 | 0x16 => {
            String::from_utf8(value.to_vec()).map_err(|_| CertError::Malformed("a common name is not UTF-8"))
        }
        _ => Err(CertError::Malformed(
            "a common name is not a UTF8, printable or IA5 string",
        )),
    }
}

fn agent_uris(extensions: &[u8]) -> Result<Vec<String>, CertError> {
    let mut uris = Vec::new();
    let mut wrapper = Der::new(extensions);
    let mut list = Der::new(wrapper.expect(SEQUENCE, "extensions")?);
    while !list.is_empty() {
        let mut extension = Der::new(list.expect(SEQUENCE, "extension")?);
        let oid = extension.expect(OID, "extension id")?;
        if extension.peek() == Some(BOOLEAN) {
            extension.next()?;
        }
        let value = extension.expect(OCTET_STRING, "extension value")?;
        if oid != SAN_OID {
            continue;
        }
        let mut outer = Der::new(value);
        let mut general_names = Der::new(outer.expect(SEQUENCE, "subject alternative names")?);
        while !general_names.is_empty() {
            let (tag, name) = general_names.next()?;
            if tag != SAN_URI {
                continue;
            }
            let uri = std::str::from_utf8(name).map_err(|_| CertError::Malformed("a URI is not ASCII"))?;
            if let Some(agent) = uri.strip_prefix(AGENT_URI_PREFIX) {
                uris.push(agent.to_string());
            }
        }
    }
    Ok(uris)
}

/// A cursor over DER bytes: one tag-length-value at a time, every length checked against what
/// is left.
struct Der<'a> {
    rest: &'a [u8],
}

impl<'a> Der<'a> {
    fn new(bytes: &'a [u8]) -> Der<'a> {
        Der { rest: bytes }
    }

    fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }

    fn peek(&self) -> Option<u8> {
        self.rest.first().copied()
    }

    /// The next value's tag and contents.
    fn next(&mut self) -> Result<(u8, &'a [u8]), CertError> {
        let [tag, first, rest @ ..] = self.rest else {
            return Err(CertError::Malformed("truncated"));
        };
        if tag & 0x1F == 0x1F {
            return Err(CertError::Malformed("a multi-byte tag"));
        }
        let (len, rest) = if first & 0x80 == 0 {
            (usize::from(*first), rest)
        } else {
            let count = usize::from(first & 0x7F);
            if count == 0 || count > 4 || rest.len() < count {
                return Err(CertError::Malformed("a bad length"));
            }
            let (bytes, rest) = rest.split_at(count);
            (bytes.iter().fold(0usize, |n, b| (n << 8) | usize::from(*b)), rest)
        };
        if rest.len() < len {
            return Err(CertError::Malformed("a length past the end"));
        }
        let (body, rest) = rest.split_at(len);
        self.rest = rest;
        Ok((*tag, body))
    }

    /// The next value, which must have `tag`.
    fn expect(&mut self, tag: u8, what: &'static str) -> Result<&'a [u8], CertError> {
        match self.next() {
            Ok((t, body)) if t == tag => Ok(body),
            Ok(_) => Err(CertError::Malformed(what)),
            Err(e) => Err(e),
        }
    }

    /// The next value, whatever its tag.
    fn any(&mut self, what: &'static str) -> Result<&'a [u8], CertError> {
        self.next()
            .map(|(_, body)| body)
            .map_err(|_| CertError::Malformed(what))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `/O=Team A/CN=alice`, SAN `DNS:localhost, URI:engram:agent:bob, IP:127.0.0.1`
    /// (made with openssl, P-256).
    const URI_AND_CN: &str = "308201a43082014ba00302010202145374013b26171e8066b0e01cd6763a282035ccd3300a06082a8648ce3d04030230123110300e06035504030c07746573742d6361301e170d3236313132363137313233335a170d3336313132333137313233335a3021310f300d060355040a0c065465616d2041310e300c06035504030c05616c6963653059301306072a8648ce3d020106082a8648ce3d03010703420004f0350dd0aa4edc06330af3502694f307cdd28c037b7a48e55da632de26a8d7f0aad39fff638223cc3f1c5d0db61485f68acd50cbf790a6a9079359b38f49849aa370306e302c0603551d110425302382096c6f63616c686f73748610656e6772616d3a6167656e743a626f6287047f000001301d0603551d0e04160414528695cfe6acc170569482e4051c584ac3573949301f0603551d230418301680141be2aeb5886389e6dd39fdad0a4c53e06a0fe911300a06082a8648ce3d0403020347003044022000c3c7d56ac6b149959075d39b3165ae7ab5c010e4782795733f2389d77ca178022008443c5d486f6f9ead70ceaa3307d21c3a0d4914ad12a1ac658f6c88753d1e43";
    /// `/O=Team A/CN=carol`, SAN `DNS:localhost`.
    const CN_ONLY: &str = "3082018e30820133a00302010202145374013b26171e8066b0e01cd6763a282035ccd4300a06082a8648ce3d04030230123110300e06035504030c07746573742d6361301e170d3236313132363137313233335a170d3336313132333137313233335a3021310f300d060355040a0c065465616d2041310e300c06035504030c056361726f6c3059301306072a8648ce3d020106082a8648ce3d03010703420004ec4cc950a65f08e2c51c3b8afb37c35a16c09ee9bbf9f2374bbf4764288dbe3de6866f433e2c9f0a30852f68fc2ec2cb3e8bd6c2dfcd0144166c8ef39209c290a358305630140603551d11040d300b82096c6f63616c686f7374301d0603551d0e041604148ab4cf20a4fb8212c91863ebf0f842d995ecdaf5301f0603551d230418301680141be2aeb5886389e6dd39fdad0a4c53e06a0fe911300a06082a8648ce3d0403020349003046022100a9db3d7ef6ec7d23f64ea0bd6b08b6ebbca08740a13357ca2ca5cd12d1b9cc37022100bfbb884f37a7893d6920e4f5c09ccf4cee93ec7b468a375c677dbf95cdc42fb6";

    fn der(hex_text: &str) -> Vec<u8> {
        hex::decode(hex_text).unwrap_or_default()
    }

    #[test]
    fn a_uri_naming_an_agent_wins_over_the_common_name() {
        let cert = der(URI_AND_CN);
        let names = names_of(&cert).expect("parses");
        assert_eq!(names.common_names, vec!["alice".to_string()]);
        assert_eq!(names.agent_uris, vec!["bob".to_string()]);
        assert_eq!(
            principal_of(&cert).expect("names"),
            Some(Principal::new("bob").expect("valid"))
        );
    }

    #[test]
    fn without_an_agent_uri_the_common_name_names_the_principal() {
        let cert = der(CN_ONLY);
        assert_eq!(
            principal_of(&cert).expect("names"),
            Some(Principal::new("carol").expect("valid"))
        );
    }

    #[test]
    fn every_truncation_and_trailing_byte_is_refused_without_panicking() {
        let cert = der(URI_AND_CN);
        for cut in 0..cert.len() {
            assert!(
                names_of(&cert[..cut]).is_err(),
                "a certificate cut at {cut} bytes parsed"
            );
        }
        let mut longer = cert.clone();
        longer.push(0);
        assert_eq!(
            names_of(&longer),
            Err(CertError::Malformed("bytes after the certificate"))
        );
        // Every single-byte corruption either fails cleanly or parses to some names; none panics.
        for i in 0..cert.len() {
            let mut bad = cert.clone();
            bad[i] ^= 0xFF;
            let _ = names_of(&bad);
        }
    }

    #[test]
    fn a_common_name_that_is_not_a_principal_is_refused() {
        // The same certificate with the CN's value bytes changed from "carol" to "car l".
        let mut cert = der(CN_ONLY);
        let at = cert
            .windows(5)
            .position(|w| w == b"carol")
            .expect("the CN is in the DER");
        cert[at + 3] = b' ';
        assert!(matches!(principal_of(&cert), Err(CertError::BadName(_))));
    }

    #[test]
    fn two_common_names_and_no_agent_uri_are_ambiguous() {
        let mut cert = der(CN_ONLY);
        // Rename the organisation's attribute type (2.5.4.10) to a common name (2.5.4.3): the
        // subject now has two CNs, "Team A" and "carol".
        let at = cert
            .windows(5)
            .position(|w| w == [0x06, 0x03, 0x55, 0x04, 0x0A])
            .expect("the O attribute is in the DER");
        cert[at + 4] = 0x03;
        assert!(
            matches!(principal_of(&cert), Err(CertError::Ambiguous(a, b)) if a == "Team A" && b == "carol")
        );
    }
}
