//! The Streamable HTTP client of a `url` server: rmcp's own reqwest client,
//! with the cause of a failed request kept for the session's error and the
//! URL taken out of the error rmcp sees.
//!
//! rmcp's error for a request that failed says only "error sending request
//! for url (...)": reqwest's causes (connection refused, timed out, a
//! proxy's refusal, a TLS alert) are in its source chain, which rmcp does
//! not print; and the URL in it may hold an API key in its query. So every
//! request goes through here: a failure's whole chain, without the URL, is
//! kept in [`LastFailure`] for `Session::connect_http`, and the error handed
//! on has no URL.
//!
//! A reply or a notification of ours answered with an event stream
//! (Streamable HTTP wants HTTP 202 for those) is taken as accepted and its
//! stream closed at once: rmcp would read each such stream in a task of its
//! own for as long as the server keeps it open (issue 49).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures_util::stream::BoxStream;
use http::{HeaderName, HeaderValue};
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};
use sse_stream::Sse;

/// Why the last request failed, in words, taken by whoever explains it.
pub(crate) type LastFailure = Arc<Mutex<Option<String>>>;

/// A reqwest client that remembers why its last request failed, and,
/// for a server that signs in with OAuth, sends its access token and
/// hands a `401`'s challenge to its sign-in (`oauth`).
#[derive(Clone)]
pub(crate) struct RemoteHttp {
    pub http: reqwest::Client,
    pub last: LastFailure,
    pub auth: Option<Arc<super::oauth::ServerAuth>>,
}

/// A reqwest error with its causes, never its URL.
pub(crate) fn chain(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        let next = c.to_string();
        // hyper repeats its inner error's text in its own.
        if !text.ends_with(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        cause = c.source();
    }
    text
}

impl RemoteHttp {
    /// The bearer token to send: the configured one (a header), else the
    /// sign-in's access token, refreshed when it is about to expire.
    async fn token(&self, configured: Option<String>) -> Option<String> {
        match (&configured, &self.auth) {
            (None, Some(auth)) => auth.bearer().await,
            _ => configured,
        }
    }

    /// After a `401` to a request that carried the sign-in's token `sent`:
    /// the refreshed token to send it again with, or `None` (no sign-in,
    /// a configured header, or the refresh refused: the `401` stands).
    async fn renewed(
        &self,
        unauthorized: bool,
        configured: bool,
        sent: Option<&str>,
    ) -> Option<String> {
        let (true, false, Some(auth), Some(sent)) = (unauthorized, configured, &self.auth, sent)
        else {
            return None;
        };
        auth.renew(sent).await
    }

    /// A message posted by `post` (rmcp has two ways to post one) with the
    /// token to send; when a `401` answers the sign-in's token, posted once
    /// more with the renewed one. The `401`'s challenge goes to the sign-in
    /// first, as the retry may succeed.
    async fn post_renewing<F, Fut>(
        &self,
        message_is_request: bool,
        auth_header: Option<String>,
        post: F,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<reqwest::Error>>
    where
        F: Fn(Option<String>) -> Fut,
        Fut: Future<
            Output = Result<StreamableHttpPostResponse, StreamableHttpError<reqwest::Error>>,
        >,
    {
        let configured = auth_header.is_some();
        let auth_header = self.token(auth_header).await;
        let r = post(auth_header.clone()).await;
        let unauthorized = matches!(r, Err(StreamableHttpError::AuthRequired(_)));
        if let (Err(StreamableHttpError::AuthRequired(e)), Some(auth)) = (&r, &self.auth) {
            auth.challenged(&e.www_authenticate_header);
        }
        let r = match self
            .renewed(unauthorized, configured, auth_header.as_deref())
            .await
        {
            Some(token) => post(Some(token)).await,
            None => r,
        };
        accepted_unless_request(message_is_request, self.kept(r))
    }

    fn kept<T>(
        &self,
        r: Result<T, StreamableHttpError<reqwest::Error>>,
    ) -> Result<T, StreamableHttpError<reqwest::Error>> {
        if let (Err(StreamableHttpError::AuthRequired(e)), Some(auth)) = (&r, &self.auth) {
            auth.challenged(&e.www_authenticate_header);
        }
        r.map_err(|e| match e {
            StreamableHttpError::Client(e) => {
                let e = e.without_url();
                *self.last.lock().unwrap_or_else(|p| p.into_inner()) = Some(chain(&e));
                StreamableHttpError::Client(e)
            }
            other => other,
        })
    }
}

/// `r`, with the event stream that answered a message other than a request
/// closed and taken as accepted: only a request has anything to wait for.
fn accepted_unless_request(
    message_is_request: bool,
    r: Result<StreamableHttpPostResponse, StreamableHttpError<reqwest::Error>>,
) -> Result<StreamableHttpPostResponse, StreamableHttpError<reqwest::Error>> {
    match r {
        Ok(StreamableHttpPostResponse::Sse(stream, _)) if !message_is_request => {
            drop(stream);
            Ok(StreamableHttpPostResponse::Accepted)
        }
        other => other,
    }
}

fn is_request(message: &ClientJsonRpcMessage) -> bool {
    matches!(message, rmcp::model::JsonRpcMessage::Request(_))
}

impl StreamableHttpClient for RemoteHttp {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<reqwest::Error>> {
        self.post_renewing(is_request(&message), auth_header, |auth| {
            self.http.post_message(
                uri.clone(),
                message.clone(),
                session_id.clone(),
                auth,
                custom_headers.clone(),
            )
        })
        .await
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<reqwest::Error>> {
        let request = is_request(&message);
        let auth_header = self.token(auth_header).await;
        let r = self
            .http
            .post_message_with_max_sse_event_size(
                uri,
                message,
                session_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await;
        accepted_unless_request(request, self.kept(r))
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<reqwest::Error>> {
        self.post_renewing(is_request(&message), auth_header, |auth| {
            self.http.post_message_with_response_limits(
                uri.clone(),
                message.clone(),
                session_id.clone(),
                auth,
                custom_headers.clone(),
                limits,
            )
        })
        .await
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), StreamableHttpError<reqwest::Error>> {
        let auth_header = self.token(auth_header).await;
        let r = self
            .http
            .delete_session(uri, session_id, auth_header, custom_headers)
            .await;
        self.kept(r)
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, StreamableHttpError<reqwest::Error>>
    {
        let auth_header = self.token(auth_header).await;
        let r = self
            .http
            .get_stream(uri, session_id, last_event_id, auth_header, custom_headers)
            .await;
        self.kept(r)
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, StreamableHttpError<reqwest::Error>>
    {
        let auth_header = self.token(auth_header).await;
        let r = self
            .http
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await;
        self.kept(r)
    }
}
