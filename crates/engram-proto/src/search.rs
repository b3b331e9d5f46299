//! The wire form of a search, checked: `pb::SearchRequest` → the recall index's scope and
//! query.

use engram_recall::{DEFAULT_HOPS, Filter, MAX_HOPS, MAX_K, MAX_QUERY_BYTES, Query, Scope};
use engram_types::{Status, TxId, check_vector};

use crate::{WireError, attribute, branch, namespace, pb};

/// Hits returned when a request leaves `k` at 0.
pub const DEFAULT_K: usize = 10;

/// The scope and query `req` asks for; `latest` is the transaction to answer as of when the
/// request names none (the answering node's applied state). Refuses, naming the field, a `k`
/// above [`MAX_K`], a text over [`MAX_QUERY_BYTES`], a query with neither a word nor a
/// vector, a vector that is too long or not finite, hops above [`MAX_HOPS`], an invalid
/// attribute, an unknown status, and a valid-time window that is half given or empty. (Whether
/// the vector's dimension is one the namespace's schema has is checked where the schema is.)
pub fn search_request(req: pb::SearchRequest, latest: TxId) -> Result<(Scope, Query), WireError> {
    let scope = Scope {
        namespace: namespace("namespace", req.namespace)?,
        branch: branch("branch", req.branch)?,
    };
    let k = match req.k as usize {
        0 => DEFAULT_K,
        k if k > MAX_K => return Err(WireError::new("k", format!("must be at most {MAX_K}, not {k}"))),
        k => k,
    };
    if req.text.len() > MAX_QUERY_BYTES {
        return Err(WireError::new(
            "text",
            format!("is {} bytes; at most {MAX_QUERY_BYTES}", req.text.len()),
        ));
    }
    let vector = if req.vector.is_empty() {
        None
    } else {
        check_vector("vector", &req.vector).map_err(|e| match e {
            engram_types::ValidationError::Value { reason, .. } => WireError::new("vector", reason),
            other => WireError::new("vector", other.to_string()),
        })?;
        Some(req.vector)
    };
    if vector.is_none() && engram_recall::tokens(&req.text).is_empty() {
        return Err(WireError::new(
            "text",
            "has no words to search for (letters or digits), and no vector is given",
        ));
    }
    let hops = match req.hops {
        None => DEFAULT_HOPS,
        Some(h) if h as usize > MAX_HOPS => {
            return Err(WireError::new(
                "hops",
                format!("must be at most {MAX_HOPS}, not {h}"),
            ));
        }
        Some(h) => h as usize,
    };
    let attributes = req
        .attributes
        .into_iter()
        .enumerate()
        .map(|(i, a)| attribute(&format!("attributes[{i}]"), a))
        .collect::<Result<Vec<_>, _>>()?;
    for (i, agent) in req.agents.iter().enumerate() {
        if agent.is_empty() {
            return Err(WireError::new(format!("agents[{i}]"), "must not be empty"));
        }
    }
    let statuses = req
        .statuses
        .iter()
        .enumerate()
        .map(|(i, s)| match pb::Status::try_from(*s) {
            Ok(pb::Status::Unspecified | pb::Status::Candidate) => Ok(Status::Candidate),
            Ok(pb::Status::Verified) => Ok(Status::Verified),
            Err(_) => Err(WireError::new(
                format!("statuses[{i}]"),
                format!("unknown status {s}"),
            )),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let kinds = req
        .kinds
        .into_iter()
        .enumerate()
        .map(|(i, k)| memory_kind(&format!("kinds[{i}]"), k))
        .collect::<Result<Vec<_>, _>>()?;
    let valid_between_ns = match (req.valid_from_ns, req.valid_to_ns) {
        (None, None) => None,
        (Some(from), Some(to)) if from < to => Some((from, to)),
        (Some(from), Some(to)) => {
            return Err(WireError::new(
                "valid_to_ns",
                format!("the window [{from}, {to}) is empty"),
            ));
        }
        (Some(_), None) => return Err(WireError::new("valid_to_ns", "is required with valid_from_ns")),
        (None, Some(_)) => return Err(WireError::new("valid_from_ns", "is required with valid_to_ns")),
    };
    Ok((
        scope,
        Query {
            text: req.text,
            vector,
            hops,
            as_of: req.as_of_tx.map_or(latest, TxId),
            k,
            filter: Filter {
                attributes,
                agents: req.agents,
                statuses,
                valid_between_ns,
                kinds,
                // Set by the answering node, which reads its own clock.
                expired_at_ns: None,
            },
        },
    ))
}

/// A kind of memory as a keyword: a keyword as given, a short name (`preference`) as the
/// agent-memory schema spells its kinds (`:memory.kind/preference`).
fn memory_kind(field: &str, kind: String) -> Result<String, WireError> {
    let keyword = if kind.starts_with(':') {
        kind
    } else {
        format!(":memory.kind/{kind}")
    };
    engram_types::Value::Keyword(keyword.clone())
        .validate()
        .map_err(|e| match e {
            engram_types::ValidationError::Value { reason, .. } => WireError::new(field, reason),
            other => WireError::new(field, other.to_string()),
        })?;
    Ok(keyword)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn good() -> pb::SearchRequest {
        pb::SearchRequest {
            namespace: "team/a".into(),
            text: "deploy key".into(),
            ..Default::default()
        }
    }

    fn field(req: pb::SearchRequest) -> String {
        match search_request(req, TxId(9)) {
            Err(e) => e.field,
            Ok(q) => panic!("accepted: {q:?}"),
        }
    }

    #[test]
    fn a_plain_request_searches_the_latest_state_for_ten_hits() {
        let (scope, q) = search_request(good(), TxId(9)).expect("valid");
        assert_eq!(scope.namespace.as_str(), "team/a");
        assert_eq!(scope.branch, None);
        assert_eq!((q.as_of, q.k), (TxId(9), DEFAULT_K));
        let (_, q) = search_request(
            pb::SearchRequest {
                as_of_tx: Some(4),
                k: 3,
                statuses: vec![pb::Status::Verified as i32],
                valid_from_ns: Some(1),
                valid_to_ns: Some(2),
                ..good()
            },
            TxId(9),
        )
        .expect("valid");
        assert_eq!((q.as_of, q.k), (TxId(4), 3));
        assert_eq!(q.filter.statuses, [Status::Verified]);
        assert_eq!(q.filter.valid_between_ns, Some((1, 2)));
        assert_eq!((q.vector.as_ref(), q.hops), (None, DEFAULT_HOPS));
        let (_, q) = search_request(
            pb::SearchRequest {
                text: String::new(),
                vector: vec![0.5, -1.0],
                hops: Some(0),
                ..good()
            },
            TxId(9),
        )
        .expect("a vector alone is a query");
        assert_eq!((q.vector, q.hops), (Some(vec![0.5, -1.0]), 0));
        let (_, q) = search_request(
            pb::SearchRequest {
                kinds: vec!["preference".into(), ":team.kind/decision".into()],
                ..good()
            },
            TxId(9),
        )
        .expect("kinds by short name or keyword");
        assert_eq!(q.filter.kinds, [":memory.kind/preference", ":team.kind/decision"]);
    }

    #[test]
    fn a_kind_that_is_no_keyword_is_named() {
        for bad in ["", ":", "two words", ":no/"] {
            assert_eq!(
                field(pb::SearchRequest {
                    kinds: vec!["fact".into(), bad.into()],
                    ..good()
                }),
                "kinds[1]",
                "{bad:?}"
            );
        }
    }

    #[test]
    fn bad_fields_are_named() {
        assert_eq!(
            field(pb::SearchRequest {
                namespace: "".into(),
                ..good()
            }),
            "namespace"
        );
        assert_eq!(
            field(pb::SearchRequest {
                branch: "a/b".into(),
                ..good()
            }),
            "branch"
        );
        assert_eq!(field(pb::SearchRequest { k: 101, ..good() }), "k");
        assert_eq!(
            field(pb::SearchRequest {
                hops: Some(4),
                ..good()
            }),
            "hops"
        );
        for bad in [vec![f32::NAN], vec![1.0, f32::INFINITY], vec![0.0; 4097]] {
            assert_eq!(
                field(pb::SearchRequest {
                    vector: bad,
                    ..good()
                }),
                "vector"
            );
        }
        assert_eq!(
            field(pb::SearchRequest {
                text: "".into(),
                ..good()
            }),
            "text"
        );
        assert_eq!(
            field(pb::SearchRequest {
                text: "?!".into(),
                ..good()
            }),
            "text"
        );
        assert_eq!(
            field(pb::SearchRequest {
                text: "w ".repeat(3000),
                ..good()
            }),
            "text"
        );
        assert_eq!(
            field(pb::SearchRequest {
                attributes: vec![":ok/a".into(), "bad".into()],
                ..good()
            }),
            "attributes[1]"
        );
        assert_eq!(
            field(pb::SearchRequest {
                agents: vec!["".into()],
                ..good()
            }),
            "agents[0]"
        );
        assert_eq!(
            field(pb::SearchRequest {
                statuses: vec![9],
                ..good()
            }),
            "statuses[0]"
        );
        assert_eq!(
            field(pb::SearchRequest {
                valid_from_ns: Some(5),
                ..good()
            }),
            "valid_to_ns"
        );
        assert_eq!(
            field(pb::SearchRequest {
                valid_to_ns: Some(5),
                ..good()
            }),
            "valid_from_ns"
        );
        assert_eq!(
            field(pb::SearchRequest {
                valid_from_ns: Some(5),
                valid_to_ns: Some(5),
                ..good()
            }),
            "valid_to_ns"
        );
    }
}
