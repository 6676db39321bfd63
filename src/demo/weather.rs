//! The demo's http handler: the `get_weather` contract of
//! `examples/handlers/weather_http.py`, served in-process so that the demo
//! needs nothing but the binary. It answers envelopes and never fails itself.
//! A failure is `{"output": {"error": MSG}, "is_error": true, "error": MSG}`:
//! main_server shows the model `output` alone (`is_error` and `error` go to
//! its logs), so the message for the model is in `output`.

use std::net::SocketAddr;

use axum::Router;
use axum::body::Bytes;
use axum::response::IntoResponse;
use axum::routing::post;
use serde_json::{Value as Json, json};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// The fixed weather of the example, as the Python handler has it.
const WEATHER: [(&str, i64, &str); 3] = [
    ("tokyo", 22, "sunny"),
    ("osaka", 24, "cloudy"),
    ("sapporo", 9, "snow"),
];

/// The answer for one callback body.
pub(crate) fn answer(call: &Json) -> Json {
    let city = call["arguments"]["city"].as_str().unwrap_or("");
    let unit = call["arguments"]["unit"].as_str().unwrap_or("celsius");
    match WEATHER
        .iter()
        .find(|(c, _, _)| c.eq_ignore_ascii_case(city))
    {
        Some((_, temp_c, sky)) => {
            let mut out = json!({"city": city, "temp_c": temp_c, "weather": sky});
            if unit == "fahrenheit" {
                out["temp_f"] = json!(*temp_c as f64 * 9.0 / 5.0 + 32.0);
            }
            json!({"output": out, "is_error": false})
        }
        None => {
            let message = format!("unknown city {city:?}; known cities: Tokyo, Osaka, Sapporo");
            json!({"output": {"error": message}, "is_error": true, "error": message})
        }
    }
}

async fn on_call(body: Bytes) -> impl IntoResponse {
    let call: Json = serde_json::from_slice(&body).unwrap_or(Json::Null);
    axum::Json(answer(&call))
}

/// Serves the handler on `listener` until `stop`.
pub fn serve(listener: TcpListener, stop: CancellationToken) -> std::io::Result<SocketAddr> {
    let addr = listener.local_addr()?;
    let app = Router::new().fallback(post(on_call));
    tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(stop.cancelled_owned())
            .await;
    });
    Ok(addr)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_and_unknown_cities() {
        let a = answer(&json!({"arguments": {"city": "Tokyo"}}));
        assert_eq!(
            a,
            json!({"output": {"city": "Tokyo", "temp_c": 22, "weather": "sunny"}, "is_error": false})
        );
        let f = answer(&json!({"arguments": {"city": "osaka", "unit": "fahrenheit"}}));
        assert_eq!(f["output"]["temp_f"], json!(75.2));
        let e = answer(&json!({"arguments": {"city": "Paris"}}));
        assert_eq!(e["is_error"], json!(true));
        assert!(e["error"].as_str().unwrap().contains("known cities"));
        assert_eq!(
            e["output"]["error"], e["error"],
            "the model reads `output` alone"
        );
    }
}
