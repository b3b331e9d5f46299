use crate::ClientError;

/// Turns an endpoint as a user writes it (`127.0.0.1:7001`, `node-1:7001`, `http://[::1]:7001`)
/// into the `http://` URI a channel connects to (the client switches it to `https://` when it
/// is configured for TLS; `https://` input is accepted and means the same host and port).
///
/// Refuses what would otherwise fail later and more obscurely: empty input, other schemes,
/// paths, and a missing or invalid port.
pub fn parse_endpoint(raw: &str) -> Result<String, ClientError> {
    let fail = |reason: &str| {
        Err(ClientError::Endpoint {
            endpoint: raw.to_string(),
            reason: reason.into(),
        })
    };
    let trimmed = raw.trim();
    if trimmed.is_empty() {
        return fail("is empty");
    }
    // The scheme follows the client's TLS setting; https:// is accepted as a reminder of it.
    let authority = if let Some(rest) = trimmed
        .strip_prefix("http://")
        .or_else(|| trimmed.strip_prefix("https://"))
    {
        rest
    } else if trimmed.contains("://") {
        return fail("only http:// and https:// endpoints are supported");
    } else {
        trimmed
    };
    let authority = authority.strip_suffix('/').unwrap_or(authority);
    if authority.contains('/') {
        return fail("must be host:port without a path");
    }
    // Split at the last ':' so bracketed IPv6 literals keep their inner colons.
    let Some((host, port)) = authority.rsplit_once(':') else {
        return fail("needs a port, as in 127.0.0.1:7001");
    };
    if host.is_empty() {
        return fail("needs a host before the port");
    }
    if host.contains(':') && !(host.starts_with('[') && host.ends_with(']')) {
        return fail("IPv6 addresses must be bracketed, as in [::1]:7001");
    }
    match port.parse::<u16>() {
        Ok(p) if p > 0 => {}
        _ => return fail("port must be a number in 1..=65535"),
    }
    Ok(format!("http://{authority}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_host_port_forms() {
        assert_eq!(parse_endpoint("127.0.0.1:7001").unwrap(), "http://127.0.0.1:7001");
        assert_eq!(parse_endpoint(" node-1:7001 ").unwrap(), "http://node-1:7001");
        assert_eq!(
            parse_endpoint("http://localhost:9/").unwrap(),
            "http://localhost:9"
        );
        assert_eq!(parse_endpoint("[::1]:7001").unwrap(), "http://[::1]:7001");
    }

    #[test]
    fn refuses_malformed_endpoints_with_a_reason() {
        for (bad, reason) in [
            ("", "empty"),
            ("localhost", "port"),
            ("localhost:", "port"),
            ("localhost:0", "port"),
            ("localhost:70000", "port"),
            (":7001", "host"),
            ("grpc://x:1", "http://"),
            ("x:1/path", "path"),
            ("::1:7001", "bracketed"),
        ] {
            let err = parse_endpoint(bad).unwrap_err().to_string();
            assert!(err.contains(reason), "{bad:?}: {err}");
        }
    }
}
