//! A real browser for the dashboard's tests: headless Chromium driven through ChromeDriver
//! (WebDriver, Debian's `chromium` and `chromium-driver`), axe-core for accessibility checks,
//! and screenshots of each page at desktop and phone widths under `target/screenshots/`.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};

/// Where screenshots go: `target/screenshots/` of the workspace.
pub fn screenshot_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/screenshots")
}

/// axe-core's script: `$AXE_CORE_JS`, or where `scripts/test` installs it
/// (`npm install --prefix target/browser axe-core@4`).
fn axe_script() -> String {
    let path = std::env::var("AXE_CORE_JS")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../../target/browser/node_modules/axe-core/axe.min.js")
        });
    std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "axe-core not found at {} ({e}): run `npm install --prefix target/browser axe-core@4` (as .ci/run does) or set AXE_CORE_JS",
            path.display()
        )
    })
}

/// A headless Chromium under ChromeDriver.
pub struct Browser {
    /// The WebDriver session.
    pub client: Client,
    driver: Child,
    /// Chromium's profile, removed with the browser.
    _profile: tempfile::TempDir,
}

impl Drop for Browser {
    /// Kills ChromeDriver's process group, Chromium and its helpers included (killing the
    /// driver alone would leave them running, orphaned), then removes the profile.
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.driver.id())])
            .stderr(Stdio::null())
            .status();
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

impl Browser {
    /// Starts ChromeDriver on a free port and a headless Chromium with a fresh profile.
    pub async fn start() -> Browser {
        Self::launch(&[]).await
    }

    /// [`Browser::start`] as on a system whose theme is dark: pages see
    /// `prefers-color-scheme: dark`.
    pub async fn start_dark() -> Browser {
        Self::launch(&["--force-dark-mode"]).await
    }

    async fn launch(extra: &[&str]) -> Browser {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // A group of its own, with the browser it starts: killed whole on drop.
            .process_group(0)
            .spawn()
            .expect("chromedriver (Debian package chromium-driver; scripts/test installs it)");
        let profile = tempfile::tempdir().expect("profile dir");
        let mut args: Vec<String> = [
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--window-size=1280,900",
        ]
        .iter()
        .chain(extra)
        .map(|a| a.to_string())
        .collect();
        args.push(format!("--user-data-dir={}", profile.path().display()));
        let caps = json!({
            "goog:chromeOptions": { "binary": "/usr/bin/chromium", "args": args }
        });
        let caps = match caps {
            Value::Object(map) => map,
            _ => unreachable!(),
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        let client = loop {
            let connector = hyper_util::client::legacy::connect::HttpConnector::new();
            match ClientBuilder::new(connector)
                .capabilities(caps.clone())
                .connect(&format!("http://127.0.0.1:{port}"))
                .await
            {
                Ok(c) => break c,
                Err(e) => {
                    assert!(
                        Instant::now() < deadline,
                        "cannot start a browser session: {e}"
                    );
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        };
        Browser {
            client,
            driver,
            _profile: profile,
        }
    }

    /// Opens `url`.
    pub async fn goto(&self, url: &str) {
        self.client.goto(url).await.expect("navigate");
    }

    /// Reloads the page, as the browser's reload button does.
    pub async fn reload(&self) {
        self.client.refresh().await.expect("reload");
    }

    /// The address the browser shows.
    pub async fn url(&self) -> String {
        self.client.current_url().await.expect("url").to_string()
    }

    /// The page's HTML as it is now.
    pub async fn source(&self) -> String {
        self.client.source().await.expect("page source")
    }

    /// Waits (up to 20 s) until the page, as it changes by itself, contains `text`.
    pub async fn wait_for_text(&self, text: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let source = self.source().await;
            if source.contains(text) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the page never showed {text:?}; it shows: {source}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Types `value` into the field matching the CSS `selector`.
    pub async fn fill(&self, selector: &str, value: &str) {
        self.client
            .find(Locator::Css(selector))
            .await
            .unwrap_or_else(|e| panic!("no {selector}: {e}"))
            .send_keys(value)
            .await
            .expect("type");
    }

    /// Clicks the element matching the CSS `selector`.
    pub async fn click(&self, selector: &str) {
        self.client
            .find(Locator::Css(selector))
            .await
            .unwrap_or_else(|e| panic!("no {selector}: {e}"))
            .click()
            .await
            .expect("click");
    }

    /// Moves keyboard focus to the element matching the CSS `selector`.
    pub async fn focus(&self, selector: &str) {
        self.client
            .execute(
                "document.querySelector(arguments[0]).focus()",
                vec![serde_json::json!(selector)],
            )
            .await
            .unwrap_or_else(|e| panic!("focus {selector}: {e}"));
    }

    /// The element that has keyboard focus, as `TAG href` (`BODY ` when none does).
    pub async fn focused(&self) -> String {
        let script = "const a = document.activeElement; return a.tagName + ' ' + (a.getAttribute('href') || '');";
        let value = self.client.execute(script, vec![]).await.expect("focused");
        value.as_str().unwrap_or_default().to_string()
    }

    /// The text of the element matching the CSS `selector`.
    pub async fn text(&self, selector: &str) -> String {
        self.client
            .find(Locator::Css(selector))
            .await
            .unwrap_or_else(|e| panic!("no {selector}: {e}"))
            .text()
            .await
            .expect("text")
    }

    /// Saves `target/screenshots/{name}-desktop.png` (1280 wide) and `{name}-phone.png`
    /// (390 wide), then returns to the desktop size.
    pub async fn screenshots(&self, name: &str) {
        let dir = screenshot_dir();
        std::fs::create_dir_all(&dir).expect("screenshot dir");
        for (suffix, width, height) in [("phone", 390, 844), ("desktop", 1280, 900)] {
            self.client
                .set_window_size(width, height)
                .await
                .expect("window size");
            let png = self.client.screenshot().await.expect("screenshot");
            std::fs::write(dir.join(format!("{name}-{suffix}.png")), png).expect("save");
        }
    }

    /// Runs axe-core on the page: its serious and critical violations (id and help text).
    pub async fn accessibility_problems(&self) -> Vec<String> {
        self.client
            .execute(&axe_script(), vec![])
            .await
            .expect("inject axe-core");
        let result = self
            .client
            .execute_async(
                "const done = arguments[arguments.length - 1];
                 axe.run(document).then(r => done(r.violations.map(v => ({id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.map(n => n.html)}))));",
                vec![],
            )
            .await
            .expect("run axe-core");
        result
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(|v| matches!(v["impact"].as_str(), Some("serious" | "critical")))
            .map(|v| format!("{}: {} {}", v["id"], v["help"], v["nodes"]))
            .collect()
    }

    /// The page's background and text colours as the browser computes them for its body,
    /// each as `[r, g, b]`.
    pub async fn body_colours(&self) -> ([u8; 3], [u8; 3]) {
        let value = self
            .client
            .execute(
                "const s = getComputedStyle(document.body); return [s.backgroundColor, s.color];",
                vec![],
            )
            .await
            .expect("read the body's colours");
        let rgb = |v: &Value| -> [u8; 3] {
            let text = v.as_str().unwrap_or_default();
            let parts: Vec<u8> = text
                .trim_start_matches("rgba(")
                .trim_start_matches("rgb(")
                .trim_end_matches(')')
                .split(',')
                .filter_map(|p| p.trim().parse().ok())
                .collect();
            assert!(parts.len() >= 3, "a colour the test cannot read: {text}");
            [parts[0], parts[1], parts[2]]
        };
        (rgb(&value[0]), rgb(&value[1]))
    }

    /// Screenshots and an accessibility check of the page, which must have no serious or
    /// critical problem.
    pub async fn check_page(&self, name: &str) {
        self.screenshots(name).await;
        let problems = self.accessibility_problems().await;
        assert!(
            problems.is_empty(),
            "{name}: accessibility problems: {problems:#?}"
        );
    }
}
