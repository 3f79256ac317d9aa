//! The API's client, for the CLI, the lab and the tests: HTTP/1.1 over the daemon's unix
//! socket, or over TCP with a bearer token.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

/// Where the daemon's API is.
#[derive(Clone, Debug)]
pub enum Endpoint {
    /// The control unix socket (local: no token).
    Unix(PathBuf),
    /// `host:port` over TCP, with the token the daemon's `api.token_file` holds.
    Tcp {
        /// `host:port`.
        addr: String,
        /// Bearer token.
        token: Option<String>,
    },
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Endpoint::Unix(p) => write!(f, "{}", p.display()),
            Endpoint::Tcp { addr, .. } => write!(f, "http://{addr}"),
        }
    }
}

/// A response: status, content type and body.
#[derive(Debug)]
pub struct Reply {
    /// HTTP status.
    pub status: u16,
    /// `Content-Type`, if any.
    pub content_type: String,
    /// Body bytes.
    pub body: Vec<u8>,
}

impl Reply {
    /// The body as JSON.
    pub fn json(&self) -> Result<Value> {
        serde_json::from_slice(&self.body).with_context(|| {
            format!(
                "bad response from daemon (status {}): {:?}",
                self.status,
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    /// The body as JSON if the status is 2xx, else the daemon's error message as an error.
    pub fn ok_json(&self) -> Result<Value> {
        if (200..300).contains(&self.status) {
            return self.json();
        }
        bail!("daemon: {}", self.error_message())
    }

    /// The body as a `T` (one of [`crate::model`]'s types); the error names the type and
    /// shows the body.
    pub fn body_as<T: DeserializeOwned>(&self) -> Result<T> {
        serde_json::from_slice(&self.body).with_context(|| {
            format!(
                "the daemon's answer (status {}) is not a {}: {:?}",
                self.status,
                std::any::type_name::<T>()
                    .rsplit("::")
                    .next()
                    .unwrap_or("value"),
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    /// The body as a `T` if the status is 2xx, else the daemon's error message as an error.
    pub fn ok_as<T: DeserializeOwned>(&self) -> Result<T> {
        if (200..300).contains(&self.status) {
            return self.body_as();
        }
        bail!("daemon: {}", self.error_message())
    }

    /// The `error` of a JSON error body ([`crate::model::ErrorBody`]), or the body itself.
    pub fn error_message(&self) -> String {
        match serde_json::from_slice::<crate::model::ErrorBody>(&self.body) {
            Ok(e) => e.error,
            Err(_) => String::from_utf8_lossy(&self.body).into_owned(),
        }
    }
}

/// A client of one daemon.
#[derive(Clone, Debug)]
pub struct Client {
    /// The daemon.
    pub endpoint: Endpoint,
    /// How long one request may take (a resync of a large table holds the state a while).
    pub timeout: Duration,
}

impl Client {
    /// A client with a 30 s timeout.
    pub fn new(endpoint: Endpoint) -> Client {
        Client {
            endpoint,
            timeout: Duration::from_secs(30),
        }
    }

    /// `GET path`, expecting JSON; a non-2xx answer is an error with the daemon's message.
    pub fn get(&self, path: &str) -> Result<Value> {
        self.call("GET", path, None)?.ok_json()
    }

    /// `GET path`, expecting a `T` (one of [`crate::model`]'s types); a non-2xx answer is
    /// an error with the daemon's message.
    pub fn get_as<T: DeserializeOwned>(&self, path: &str) -> Result<T> {
        self.call("GET", path, None)?.ok_as()
    }

    /// `method path` with `body` as JSON, expecting a `T`.
    pub fn send_as<B: Serialize, T: DeserializeOwned>(
        &self,
        method: &str,
        path: &str,
        body: &B,
    ) -> Result<T> {
        let bytes = serde_json::to_vec(body).context("encoding the request body")?;
        self.call(method, path, Some(("application/json", bytes)))?
            .ok_as()
    }

    /// `method path` with a JSON body, expecting JSON.
    pub fn send_json(&self, method: &str, path: &str, body: &Value) -> Result<Value> {
        self.call(
            method,
            path,
            Some(("application/json", body.to_string().into_bytes())),
        )?
        .ok_json()
    }

    /// One request; any status is returned (only transport failures are errors).
    pub fn call(&self, method: &str, path: &str, body: Option<(&str, Vec<u8>)>) -> Result<Reply> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting the client runtime")?;
        let fut = self.call_async(method, path, body);
        rt.block_on(async {
            tokio::time::timeout(self.timeout, fut)
                .await
                .with_context(|| {
                    format!(
                        "no answer from ferrouter at {} within {:?}",
                        self.endpoint, self.timeout
                    )
                })?
        })
    }

    async fn call_async(
        &self,
        method: &str,
        path: &str,
        body: Option<(&str, Vec<u8>)>,
    ) -> Result<Reply> {
        let unreachable = || {
            format!(
                "cannot reach ferrouter at {} (is `ferrouter run` running?)",
                self.endpoint
            )
        };
        let mut req = hyper::Request::builder()
            .method(method)
            .uri(path)
            .header(hyper::header::HOST, "ferrouter");
        if let Endpoint::Tcp { token: Some(t), .. } = &self.endpoint {
            req = req.header(hyper::header::AUTHORIZATION, format!("Bearer {t}"));
        }
        let (ct, bytes) = body.unwrap_or(("application/json", Vec::new()));
        if !bytes.is_empty() {
            req = req.header(hyper::header::CONTENT_TYPE, ct);
        }
        let req = req
            .body(Full::new(Bytes::from(bytes)))
            .context("building the request")?;
        let resp = match &self.endpoint {
            Endpoint::Unix(p) => {
                let s = tokio::net::UnixStream::connect(p)
                    .await
                    .with_context(unreachable)?;
                send(s, req).await?
            }
            Endpoint::Tcp { addr, .. } => {
                let s = tokio::net::TcpStream::connect(addr.as_str())
                    .await
                    .with_context(unreachable)?;
                send(s, req).await?
            }
        };
        let status = resp.status().as_u16();
        let content_type = resp
            .headers()
            .get(hyper::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let body = resp
            .into_body()
            .collect()
            .await
            .context("reading the response")?
            .to_bytes()
            .to_vec();
        Ok(Reply {
            status,
            content_type,
            body,
        })
    }
}

async fn send<S>(
    stream: S,
    req: hyper::Request<Full<Bytes>>,
) -> Result<hyper::Response<hyper::body::Incoming>>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .context("HTTP handshake with the daemon")?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    sender
        .send_request(req)
        .await
        .context("sending the request to the daemon")
}
