//! Shared by the `bench_*` drivers: starting the real `neko-sidecar`
//! binary (daemon and stand-in) as child processes on loopback, reading the
//! stand-in's registry, and summarising samples.
//!
//! Every child is killed when its guard drops, so a failed run leaves no
//! process behind. Timings are taken by the callers with `Instant` (a
//! monotonic clock).

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The `neko-sidecar` binary next to this driver (both in target/release),
/// or `NEKO_SIDECAR_BIN`.
pub fn sidecar_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("NEKO_SIDECAR_BIN") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().unwrap_or_default();
    exe.parent().unwrap_or(Path::new(".")).join("neko-sidecar")
}

/// A free loopback port (bound, then released: a small race, fine here).
pub fn free_port() -> Result<u16, BoxError> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// A child process killed (and reaped) on drop.
pub struct Proc {
    pub child: Child,
    pub name: &'static str,
}

impl Proc {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

pub fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("a plain reqwest client builds")
}

/// Polls `check` every `every` until it is true or `limit` passed.
pub async fn wait_for<F, Fut>(
    limit: Duration,
    every: Duration,
    mut check: F,
) -> Result<(), BoxError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    loop {
        if check().await {
            return Ok(());
        }
        if start.elapsed() > limit {
            return Err(format!("condition not met within {limit:?}").into());
        }
        tokio::time::sleep(every).await;
    }
}

/// `neko-sidecar dev-server` on a free port; ready when it answers.
pub struct DevServerProc {
    pub proc: Proc,
    pub url: String,
}

impl DevServerProc {
    pub async fn start() -> Result<Self, BoxError> {
        let port = free_port()?;
        let child = Command::new(sidecar_bin())
            .args(["dev-server", "--listen", &format!("127.0.0.1:{port}")])
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let url = format!("http://127.0.0.1:{port}");
        let me = DevServerProc {
            proc: Proc {
                child,
                name: "dev-server",
            },
            url,
        };
        let c = http();
        let u = format!("{}/api/tools", me.url);
        wait_for(Duration::from_secs(10), Duration::from_millis(10), || {
            let (c, u) = (c.clone(), u.clone());
            async move { c.get(&u).send().await.is_ok() }
        })
        .await?;
        Ok(me)
    }

    pub async fn get(&self, c: &reqwest::Client, path: &str) -> Result<Value, BoxError> {
        Ok(c.get(format!("{}{path}", self.url))
            .send()
            .await?
            .json()
            .await?)
    }

    pub async fn post(
        &self,
        c: &reqwest::Client,
        path: &str,
        body: Value,
    ) -> Result<Value, BoxError> {
        Ok(c.post(format!("{}{path}", self.url))
            .json(&body)
            .send()
            .await?
            .json()
            .await?)
    }
}

/// How many (role, tool) pairs of `source` a registry listing holds.
pub fn count_source(listing: &Value, source: &str) -> usize {
    listing["tools_by_role"]
        .as_object()
        .map(|roles| {
            roles
                .values()
                .filter_map(Value::as_array)
                .flatten()
                .filter(|t| t["source"] == source)
                .count()
        })
        .unwrap_or(0)
}

/// A `neko-sidecar run` process with its own config and manifest folder.
pub struct SidecarProc {
    pub proc: Proc,
    pub dir: PathBuf,
}

/// What goes into the agent config of a benchmarked daemon.
pub struct AgentSettings<'a> {
    pub source: &'a str,
    pub main_server: &'a str,
    pub poll_interval: &'a str,
    pub debounce: &'a str,
}

impl SidecarProc {
    /// Writes `agent.toml` into `dir` (manifests go to `dir/tools.d`, which
    /// must already hold them) and starts the daemon.
    pub fn start(dir: &Path, s: &AgentSettings<'_>) -> Result<Self, BoxError> {
        // BENCH_CALL_HISTORY=N sets `[admin] call_history` (the default,
        // 200, otherwise), to weigh the call history's cost against 0.
        let history = std::env::var("BENCH_CALL_HISTORY")
            .map(|n| format!("call_history = {n}\n"))
            .unwrap_or_default();
        let mut agent = format!(
            "source = \"{}\"\nmanifest_dirs = [\"tools.d\"]\n[main_server]\nurl = \"{}\"\n[callback]\nlisten = \"127.0.0.1:0\"\n[registration]\npoll_interval = \"{}\"\n[reload]\ndebounce = \"{}\"\n[admin]\nlisten = \"\"\n[log]\nlevel = \"warn\"\n",
            s.source, s.main_server, s.poll_interval, s.debounce
        );
        agent = agent.replace("[admin]\n", &format!("[admin]\n{history}"));
        std::fs::write(dir.join("agent.toml"), agent)?;
        let log = std::fs::File::create(dir.join("sidecar.log"))?;
        let child = Command::new(sidecar_bin())
            .args(["run", "--config"])
            .arg(dir.join("agent.toml"))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?;
        Ok(SidecarProc {
            proc: Proc {
                child,
                name: "neko-sidecar run",
            },
            dir: dir.to_path_buf(),
        })
    }

    /// Sends SIGTERM (through `kill`, the same as systemd).
    pub fn sigterm(&self) -> Result<(), BoxError> {
        let st = Command::new("kill")
            .args(["-TERM", &self.proc.pid().to_string()])
            .status()?;
        if !st.success() {
            return Err("kill -TERM failed".into());
        }
        Ok(())
    }
}

/// A manifest of `n` http tools named `{prefix}{i:04}`, all pointing at
/// `handler`, with a one-string-property schema.
pub fn http_tools_manifest(prefix: &str, n: usize, handler: &str) -> String {
    let mut text = String::new();
    for i in 0..n {
        text.push_str(&format!(
            "[[tool]]\nname = \"{prefix}{i:04}\"\ndescription = \"Looks up the weather of a city and answers in Celsius.\"\nhandler = {{ type = \"http\", url = \"{handler}\" }}\nparameters = {{ type = \"object\", properties = {{ city = {{ type = \"string\" }} }}, required = [\"city\"] }}\n"
        ));
    }
    text
}

/// A fresh scratch folder with an empty `tools.d`.
pub fn scratch() -> Result<tempfile::TempDir, BoxError> {
    let d = tempfile::Builder::new().prefix("neko-bench-").tempdir()?;
    std::fs::create_dir(d.path().join("tools.d"))?;
    Ok(d)
}

/// Sorted samples with the usual order statistics, in milliseconds.
pub struct Summary {
    pub n: usize,
    pub min: f64,
    pub median: f64,
    pub p99: f64,
    pub max: f64,
    pub sorted: Vec<f64>,
}

impl Summary {
    pub fn of(samples: &[Duration]) -> Summary {
        let mut v: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1e3).collect();
        v.sort_by(f64::total_cmp);
        let at = |q: f64| v[(((v.len() - 1) as f64) * q).round() as usize];
        Summary {
            n: v.len(),
            min: v[0],
            median: if v.len() % 2 == 1 {
                v[v.len() / 2]
            } else {
                (v[v.len() / 2 - 1] + v[v.len() / 2]) / 2.0
            },
            p99: at(0.99),
            max: v[v.len() - 1],
            sorted: v.clone(),
        }
    }

    /// `key_median_ms=… key_p99_ms=…` lines for `bench/run.sh`.
    pub fn print(&self, key: &str) {
        println!("{key}_n={}", self.n);
        let all: Vec<String> = self.sorted.iter().map(|x| format!("{x:.1}")).collect();
        println!("{key}_sorted_ms={}", all.join(","));
        println!("{key}_min_ms={:.3}", self.min);
        println!("{key}_median_ms={:.3}", self.median);
        println!("{key}_p99_ms={:.3}", self.p99);
        println!("{key}_max_ms={:.3}", self.max);
    }
}

/// The value given as `--name=VALUE` or `--name VALUE` on the command
/// line.
pub fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    let flag = format!("--{name}");
    let eq = format!("--{name}=");
    for (i, a) in args.iter().enumerate() {
        if let Some(v) = a.strip_prefix(&eq) {
            return Some(v.to_string());
        }
        if *a == flag {
            return args.get(i + 1).cloned();
        }
    }
    None
}

pub fn arg_or<T: std::str::FromStr>(name: &str, default: T) -> Result<T, BoxError> {
    match arg(name) {
        None => Ok(default),
        Some(v) => v
            .parse()
            .map_err(|_| format!("--{name}: cannot read {v:?}").into()),
    }
}

pub fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// Starts `bench_handler` (next to this driver) with `--slow-ms`, and
/// returns it with the address it printed.
pub fn start_handler(slow_ms: u64) -> Result<(Proc, String), BoxError> {
    use std::io::BufRead;
    let exe = std::env::current_exe()?;
    let mut child = Command::new(exe.with_file_name("bench_handler"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--slow-ms",
            &slow_ms.to_string(),
            "--max-seconds",
            "900",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()?;
    let out = child.stdout.take().ok_or("bench_handler has no stdout")?;
    let guard = Proc {
        child,
        name: "bench_handler",
    };
    let mut line = String::new();
    std::io::BufReader::new(out).read_line(&mut line)?;
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .ok_or_else(|| format!("unexpected line from bench_handler: {line:?}"))?
        .to_string();
    Ok((guard, addr))
}

/// The callback URL the stand-in holds for `tool` (waits up to 20 s for the
/// daemon to register it).
pub async fn callback_url(
    ds: &DevServerProc,
    c: &reqwest::Client,
    tool: &str,
) -> Result<String, BoxError> {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(20) {
        if let Ok(v) = ds.get(c, "/api/tools").await {
            let found = v["tools_by_role"]
                .as_object()
                .and_then(|r| r.values().next())
                .and_then(Value::as_array)
                .and_then(|t| t.iter().find(|t| t["name"] == tool))
                .and_then(|t| t["callback_url"].as_str())
                .map(str::to_string);
            if let Some(u) = found {
                return Ok(u);
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Err(format!("tool {tool} never showed up in GET /api/tools").into())
}
