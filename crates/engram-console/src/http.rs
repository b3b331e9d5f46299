//! The console's HTTP surface: the page (HTML, script, style, compiled in) and its JSON views
//! under `/api/`. Every view needs the console's token (`X-Engram-Token`), which `engram
//! console` prints in the page's address: anything else that reaches the port (another user
//! of the machine, a web page the browser runs) gets 401 and learns nothing. Only `GET`.

use std::sync::Arc;

use http_body_util::Full;
use hyper::body::Bytes;
use serde_json::json;

use crate::api::{Api, ApiError};

const INDEX_HTML: &str = include_str!("../assets/index.html");
const CONSOLE_JS: &str = include_str!("../assets/console.js");
const CONSOLE_CSS: &str = include_str!("../assets/console.css");

/// The header the page sends the token in.
pub const TOKEN_HEADER: &str = "x-engram-token";

/// What a request asks for, decided from its method, path and query alone.
#[derive(Debug, PartialEq)]
pub enum Route {
    Asset {
        content_type: &'static str,
        body: &'static str,
    },
    Cluster,
    Audit {
        node: Option<u64>,
        from: Option<u64>,
        limit: Option<u64>,
    },
    Entry {
        node: Option<u64>,
        index: u64,
    },
    Entity {
        ns: String,
        entity: u64,
    },
    Jobs {
        limit: Option<u64>,
    },
    Access {
        limit: Option<u64>,
        refused_only: bool,
    },
    Refused(ApiError),
}

/// Routes a request: `token` is the console's, `sent` what the request's header carried.
pub fn route(method: &str, path_and_query: &str, token: &str, sent: Option<&str>) -> Route {
    if method != "GET" {
        return Route::Refused(ApiError {
            status: 405,
            message: format!("{method}: the console is read-only and answers GET only"),
            code: None,
        });
    }
    let (path, query) = path_and_query.split_once('?').unwrap_or((path_and_query, ""));
    match path {
        "/" | "/index.html" => {
            return Route::Asset {
                content_type: "text/html; charset=utf-8",
                body: INDEX_HTML,
            };
        }
        "/console.js" => {
            return Route::Asset {
                content_type: "text/javascript; charset=utf-8",
                body: CONSOLE_JS,
            };
        }
        "/console.css" => {
            return Route::Asset {
                content_type: "text/css; charset=utf-8",
                body: CONSOLE_CSS,
            };
        }
        _ => {}
    }
    if !path.starts_with("/api/") {
        return Route::Refused(ApiError::not_found(format!("{path}: no such page")));
    }
    if !sent.is_some_and(|s| same(s.as_bytes(), token.as_bytes())) {
        return Route::Refused(ApiError {
            status: 401,
            message: "this console needs its token: open the address `engram console` printed".into(),
            code: None,
        });
    }
    let q = Query::parse(query);
    let parsed = (|| {
        Ok(match path {
            "/api/cluster" => Route::Cluster,
            "/api/audit" => Route::Audit {
                node: q.u64("node")?,
                from: q.u64("from")?,
                limit: q.u64("limit")?,
            },
            "/api/entry" => Route::Entry {
                node: q.u64("node")?,
                index: q
                    .u64("index")?
                    .ok_or_else(|| ApiError::bad("index: give the entry's index"))?,
            },
            "/api/entity" => Route::Entity {
                ns: q
                    .get("ns")
                    .ok_or_else(|| ApiError::bad("ns: give the entity's namespace"))?
                    .to_string(),
                entity: q
                    .u64("entity")?
                    .ok_or_else(|| ApiError::bad("entity: give the entity's id"))?,
            },
            "/api/jobs" => Route::Jobs {
                limit: q.u64("limit")?,
            },
            "/api/access" => Route::Access {
                limit: q.u64("limit")?,
                refused_only: q.get("refused") == Some("1"),
            },
            other => return Err(ApiError::not_found(format!("{other}: no such view"))),
        })
    })();
    parsed.unwrap_or_else(Route::Refused)
}

/// Compares without stopping at the first difference, so the time taken tells nothing of
/// how much of a guessed token was right.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A query string's arguments, percent-decoded.
struct Query(Vec<(String, String)>);

impl Query {
    fn parse(query: &str) -> Query {
        Query(
            query
                .split('&')
                .filter(|p| !p.is_empty())
                .map(|p| {
                    let (k, v) = p.split_once('=').unwrap_or((p, ""));
                    (decode(k), decode(v))
                })
                .collect(),
        )
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, v)| k == name && !v.is_empty())
            .map(|(_, v)| v.as_str())
    }

    fn u64(&self, name: &str) -> Result<Option<u64>, ApiError> {
        self.get(name)
            .map(|v| {
                v.parse::<u64>()
                    .map_err(|_| ApiError::bad(format!("{name}: {v:?} is not a whole number")))
            })
            .transpose()
    }
}

/// `%XX` and `+` decoded; a malformed escape is kept as written.
fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => match (hex_digit(bytes[i + 1]), hex_digit(bytes[i + 2])) {
                (Some(hi), Some(lo)) => {
                    out.push(hi << 4 | lo);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex_digit(b: u8) -> Option<u8> {
    (b as char).to_digit(16).map(|d| d as u8)
}

pub type Response = hyper::Response<Full<Bytes>>;

/// Answers one request.
pub async fn answer(
    api: Arc<Api>,
    token: Arc<String>,
    req: hyper::Request<hyper::body::Incoming>,
) -> Response {
    let sent = req
        .headers()
        .get(TOKEN_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let target = req.uri().path_and_query().map_or("/", |p| p.as_str()).to_string();
    let result = match route(req.method().as_str(), &target, &token, sent.as_deref()) {
        Route::Asset { content_type, body } => {
            return reply(200, content_type, Bytes::from_static(body.as_bytes()));
        }
        Route::Refused(e) => Err(e),
        Route::Cluster => Ok(api.cluster().await),
        Route::Audit { node, from, limit } => api.audit(node, from, limit).await,
        Route::Entry { node, index } => api.entry(node, index).await,
        Route::Entity { ns, entity } => api.entity(&ns, entity).await,
        Route::Jobs { limit } => Ok(api.jobs(limit).await),
        Route::Access { limit, refused_only } => Ok(api.access(limit, refused_only).await),
    };
    let (status, body) = match result {
        Ok(body) => (200, body),
        Err(e) => (e.status, e.to_json()),
    };
    let text = serde_json::to_vec(&body).unwrap_or_else(|e| {
        serde_json::to_vec(&json!({ "error": { "message": e.to_string() } })).unwrap_or_default()
    });
    reply(status, "application/json", Bytes::from(text))
}

fn reply(status: u16, content_type: &str, body: Bytes) -> Response {
    let mut response = hyper::Response::new(Full::new(body));
    *response.status_mut() =
        hyper::StatusCode::from_u16(status).unwrap_or(hyper::StatusCode::INTERNAL_SERVER_ERROR);
    let headers = response.headers_mut();
    if let Ok(v) = hyper::header::HeaderValue::from_str(content_type) {
        headers.insert(hyper::header::CONTENT_TYPE, v);
    }
    // Every answer is read fresh from the cluster; none is to be kept.
    headers.insert(
        hyper::header::CACHE_CONTROL,
        hyper::header::HeaderValue::from_static("no-store"),
    );
    headers.insert(
        "content-security-policy",
        hyper::header::HeaderValue::from_static(
            "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
        ),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: &str = "secret-token";

    fn refused(route: Route) -> ApiError {
        match route {
            Route::Refused(e) => e,
            other => panic!("not refused: {other:?}"),
        }
    }

    #[test]
    fn the_page_needs_no_token_every_view_does() {
        assert!(matches!(route("GET", "/", T, None), Route::Asset { .. }));
        assert!(matches!(
            route("GET", "/console.js?x=1", T, None),
            Route::Asset { .. }
        ));
        assert_eq!(refused(route("GET", "/api/cluster", T, None)).status, 401);
        assert_eq!(
            refused(route("GET", "/api/cluster", T, Some("secret-tokeN"))).status,
            401
        );
        assert_eq!(
            refused(route("GET", "/api/cluster", T, Some("secret"))).status,
            401
        );
        assert_eq!(route("GET", "/api/cluster", T, Some(T)), Route::Cluster);
    }

    #[test]
    fn only_get_and_known_paths() {
        assert_eq!(refused(route("POST", "/api/cluster", T, Some(T))).status, 405);
        assert_eq!(refused(route("DELETE", "/", T, Some(T))).status, 405);
        assert_eq!(refused(route("GET", "/etc/passwd", T, Some(T))).status, 404);
        assert_eq!(refused(route("GET", "/api/write", T, Some(T))).status, 404);
    }

    #[test]
    fn arguments_are_parsed_and_bad_ones_named() {
        assert_eq!(
            route("GET", "/api/audit?from=5&limit=20&node=1", T, Some(T)),
            Route::Audit {
                node: Some(1),
                from: Some(5),
                limit: Some(20)
            }
        );
        assert_eq!(
            route("GET", "/api/entity?ns=team%2Fa&entity=12", T, Some(T)),
            Route::Entity {
                ns: "team/a".into(),
                entity: 12
            }
        );
        let e = refused(route("GET", "/api/audit?from=abc", T, Some(T)));
        assert_eq!(
            (e.status, e.message.as_str()),
            (400, "from: \"abc\" is not a whole number")
        );
        let e = refused(route("GET", "/api/entry", T, Some(T)));
        assert!(e.status == 400 && e.message.starts_with("index:"), "{e:?}");
        let e = refused(route("GET", "/api/entity?entity=3", T, Some(T)));
        assert!(e.status == 400 && e.message.starts_with("ns:"), "{e:?}");
        let e = refused(route("GET", "/api/entity?ns=a&entity=-1", T, Some(T)));
        assert!(e.status == 400 && e.message.starts_with("entity:"), "{e:?}");
        assert_eq!(
            route("GET", "/api/access?refused=1", T, Some(T)),
            Route::Access {
                limit: None,
                refused_only: true
            }
        );
    }

    #[test]
    fn percent_decoding() {
        assert_eq!(decode("a%2Fb+c"), "a/b c");
        assert_eq!(decode("100%"), "100%");
        assert_eq!(decode("%zz%41"), "%zzA");
        assert_eq!(decode("%4"), "%4");
        assert_eq!(decode("%é%41"), "%éA");
    }
}
