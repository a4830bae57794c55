//! A tiny async RESP client over one TCP connection, for administration
//! and byte-exact tests (the wire format is in `resp.rs`).

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::error::{HarnessError, HarnessResult};
use super::resp::{RespValue, encode_command, frame_len, parse_reply};

/// How long [`RespClient`] waits for a connection or a reply unless told
/// otherwise ([`RespClient::set_timeout`]).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// A minimal async RESP client over one TCP connection.
///
/// Commands are lists of byte strings; replies come back parsed
/// ([`RespClient::cmd`]) or as the exact bytes the server sent
/// ([`RespClient::cmd_raw`]). Every operation is bounded by a timeout
/// ([`DEFAULT_TIMEOUT`] unless changed); after a timeout or a protocol error
/// the connection is out of step with the server and refuses further use.
#[derive(Debug)]
pub struct RespClient {
    stream: TcpStream,
    addr: SocketAddr,
    buf: Vec<u8>,
    timeout: Duration,
    broken: Option<String>,
}

impl RespClient {
    /// Connects to `addr`, waiting at most [`DEFAULT_TIMEOUT`].
    ///
    /// # Errors
    /// [`HarnessError::Io`] (see [`HarnessError::is_connection_refused`]) or
    /// [`HarnessError::Timeout`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future drops the half-open connection.
    pub async fn connect(addr: SocketAddr) -> HarnessResult<Self> {
        Self::connect_timeout(addr, DEFAULT_TIMEOUT).await
    }

    /// Connects to `127.0.0.1:port`.
    ///
    /// # Errors
    /// As [`RespClient::connect`].
    ///
    /// # Cancel safety
    ///
    /// As [`RespClient::connect`].
    pub async fn connect_port(port: u16) -> HarnessResult<Self> {
        Self::connect(SocketAddr::from(([127, 0, 0, 1], port))).await
    }

    /// Connects to `addr`; `timeout` bounds the connection and every later
    /// operation.
    ///
    /// # Errors
    /// As [`RespClient::connect`].
    ///
    /// # Cancel safety
    ///
    /// As [`RespClient::connect`].
    pub async fn connect_timeout(addr: SocketAddr, timeout: Duration) -> HarnessResult<Self> {
        let stream = match tokio::time::timeout(timeout, TcpStream::connect(addr)).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return Err(HarnessError::io(format!("connecting to {addr}"), e)),
            Err(_) => {
                return Err(HarnessError::Timeout {
                    what: format!("connecting to {addr}"),
                    after: timeout,
                });
            }
        };
        // Best effort: small commands should not wait for Nagle.
        let _ = stream.set_nodelay(true);
        Ok(RespClient {
            stream,
            addr,
            buf: Vec::with_capacity(4096),
            timeout,
            broken: None,
        })
    }

    /// The address this client is connected to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Sets the bound on each later operation.
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    /// The current per-operation bound.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Sends a command and returns the parsed reply. An error reply is
    /// `Ok(RespValue::Error(..))`, not `Err`.
    ///
    /// # Errors
    /// I/O errors, [`HarnessError::Timeout`], [`HarnessError::Protocol`].
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: dropped after the command went out, the future leaves
    /// its reply unread, and the next read returns it. Drop the client too, or
    /// bound the call with [`RespClient::set_timeout`] instead (a timed-out
    /// client refuses further use).
    pub async fn cmd<A: AsRef<[u8]>>(&mut self, args: &[A]) -> HarnessResult<RespValue> {
        let raw = self.cmd_raw(args).await?;
        // The reply was framed completely, so the connection stays in step
        // even when it cannot be represented (RESP3).
        parse_reply(&raw)
    }

    /// Sends a command and returns the exact bytes of the one complete reply,
    /// for byte-for-byte comparisons.
    ///
    /// # Errors
    /// As [`RespClient::cmd`].
    ///
    /// # Cancel safety
    ///
    /// As [`RespClient::cmd`].
    pub async fn cmd_raw<A: AsRef<[u8]>>(&mut self, args: &[A]) -> HarnessResult<Vec<u8>> {
        self.send_raw(&encode_command(args)).await?;
        self.read_raw().await
    }

    /// Writes bytes as they are (pipelines, inline commands, malformed
    /// input). Read the replies with [`RespClient::read_raw`] or
    /// [`RespClient::read`].
    ///
    /// # Errors
    /// As [`RespClient::cmd`].
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: dropping the future can leave part of `bytes` written.
    /// Drop the client too.
    pub async fn send_raw(&mut self, bytes: &[u8]) -> HarnessResult<()> {
        self.usable()?;
        let what = format!("writing to {}", self.addr);
        let r = match tokio::time::timeout(self.timeout, self.stream.write_all(bytes)).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(HarnessError::io(what, e)),
            Err(_) => Err(HarnessError::Timeout {
                what,
                after: self.timeout,
            }),
        };
        self.check(r)
    }

    /// Reads one complete reply and returns its exact bytes.
    ///
    /// # Errors
    /// As [`RespClient::cmd`]; a connection closed before a complete reply
    /// is an [`HarnessError::Io`] of kind `UnexpectedEof`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: bytes already read stay in the client's buffer, and the
    /// next read continues the same reply.
    pub async fn read_raw(&mut self) -> HarnessResult<Vec<u8>> {
        self.usable()?;
        let timeout = self.timeout;
        let addr = self.addr;
        let r = match tokio::time::timeout(timeout, self.read_frame()).await {
            Ok(r) => r,
            Err(_) => Err(HarnessError::Timeout {
                what: format!("waiting for a reply from {addr}"),
                after: timeout,
            }),
        };
        self.check(r)
    }

    /// Reads one reply and parses it.
    ///
    /// # Errors
    /// As [`RespClient::cmd`].
    ///
    /// # Cancel safety
    ///
    /// As [`RespClient::read_raw`].
    pub async fn read(&mut self) -> HarnessResult<RespValue> {
        let raw = self.read_raw().await?;
        parse_reply(&raw)
    }

    async fn read_frame(&mut self) -> HarnessResult<Vec<u8>> {
        loop {
            if let Some(n) = frame_len(&self.buf)? {
                let rest = self.buf.split_off(n);
                return Ok(std::mem::replace(&mut self.buf, rest));
            }
            let mut chunk = [0u8; 8192];
            let n = self
                .stream
                .read(&mut chunk)
                .await
                .map_err(|e| HarnessError::io(format!("reading from {}", self.addr), e))?;
            if n == 0 {
                return Err(HarnessError::io(
                    format!("reading from {}", self.addr),
                    std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "connection closed by the server"),
                ));
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    fn usable(&self) -> HarnessResult<()> {
        match &self.broken {
            None => Ok(()),
            Some(why) => Err(HarnessError::Protocol(format!(
                "connection to {} is unusable after an earlier failure ({why})",
                self.addr
            ))),
        }
    }

    fn check<T>(&mut self, r: HarnessResult<T>) -> HarnessResult<T> {
        if let Err(e) = &r
            && self.broken.is_none()
        {
            self.broken = Some(e.to_string());
        }
        r
    }
}
