//! End-to-end: headless Chromium (Debian `chromium` + `chromium-driver`, over
//! WebDriver with fantoccini) opens Decision Studio on `dgem serve --studio`
//! with the embedded model, shows an in-place error, picks a policy, fills its
//! variable, runs by keyboard, and checks every option bar (width, value, text)
//! against the reply JSON, the hesitation bands and agreement. Screenshots go
//! to `target/studio-screenshot.png` (and `-narrow.png`, a 390 px wide phone).
//! Skips, saying why, without `DGEM_TEST_MODEL` or Chromium (under `CI` both
//! are required: `scripts/deps` installs Chromium, `scripts/test` the model).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

mod common;
#[path = "common/server.rs"]
mod server;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::key::Key;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{json, Value};

/// A 1×1 PNG.
const PNG_1X1: &[u8] = &[
    0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0x00, 0x00, 0x00, 0x0D, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1F, 0x15, 0xC4,
    0x89, 0x00, 0x00, 0x00, 0x0A, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9C, 0x63, 0x00, 0x01, 0x00, 0x00,
    0x05, 0x00, 0x01, 0x0D, 0x0A, 0x2D, 0xB4, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4E, 0x44, 0xAE,
    0x42, 0x60, 0x82,
];

/// A decision with 2 samples on the CPU model, on a busy 2-core machine.
const DECISION_TIMEOUT: Duration = Duration::from_secs(300);

fn chromium() -> PathBuf {
    std::env::var_os("DGEM_CHROMIUM")
        .map_or_else(|| PathBuf::from("/usr/bin/chromium"), PathBuf::from)
}

fn chromedriver() -> PathBuf {
    std::env::var_os("DGEM_CHROMEDRIVER")
        .map_or_else(|| PathBuf::from("chromedriver"), PathBuf::from)
}

fn runs(bin: &PathBuf) -> bool {
    Command::new(bin)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A chromedriver child on a free port; killed on drop.
struct Driver {
    child: Child,
    url: String,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn start_driver() -> Driver {
    let port = server::free_port();
    let child = Command::new(chromedriver())
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn chromedriver");
    let driver = Driver {
        child,
        url: format!("http://127.0.0.1:{port}"),
    };
    let started = Instant::now();
    while reqwest::get(format!("{}/status", driver.url))
        .await
        .is_err()
    {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "chromedriver did not start"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    driver
}

async fn browser(driver: &Driver) -> Client {
    let caps = json!({
        "browserName": "chrome",
        "goog:chromeOptions": {
            "binary": chromium(),
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                     "--disable-dev-shm-usage", "--window-size=1280,1800"],
        },
    });
    let Value::Object(caps) = caps else {
        unreachable!("a JSON object")
    };
    ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(&driver.url)
        .await
        .expect("a WebDriver session")
}

/// Everything the page shows for the decision, read in one script.
const READ_PAGE: &str = r#"
const raw = JSON.parse(document.querySelector('#raw-json').textContent);
const cards = [...document.querySelectorAll('#cards article.card')].map((c) => ({
  question: c.dataset.question,
  band: c.dataset.band,
  bandText: c.querySelector('.band').textContent,
  agreement: c.querySelector('.agreement') ? c.querySelector('.agreement').textContent : null,
  answer: c.querySelector('.chosen').textContent,
  bars: [...c.querySelectorAll('.bars li')].map((li) => ({
    option: li.dataset.option,
    probability: Number(li.dataset.probability),
    text: li.querySelector('.value').textContent,
    ratio: li.querySelector('.fill').getBoundingClientRect().width / li.querySelector('.track').clientWidth,
  })),
}));
const summary = Object.fromEntries([...document.querySelectorAll('#summary div')]
  .map((d) => [d.dataset.key, d.querySelector('dd').textContent]));
return { raw, cards, summary, live: document.querySelector('#results').getAttribute('aria-live') };
"#;

fn expected_band(h: f64) -> (&'static str, &'static str) {
    if h < 0.16 {
        ("clear", "clear")
    } else if h <= 0.5 {
        ("unsure", "unsure")
    } else {
        ("very_unsure", "very unsure")
    }
}

fn chosen(a: &Value) -> String {
    for k in ["answer", "choice", "level", "label"] {
        if let Some(s) = a[k].as_str() {
            return s.to_string();
        }
    }
    panic!("no answer field in {a}")
}

/// Check every card of the page against the reply JSON it shows.
fn check_cards(page: &Value, samples: u64, questions: &[&str]) {
    let answers = page["raw"]["answers"]
        .as_object()
        .expect("answers in the reply");
    let cards = page["cards"].as_array().unwrap();
    assert_eq!(cards.len(), answers.len(), "one card per answer");
    let mut ids: Vec<&str> = cards
        .iter()
        .map(|c| c["question"].as_str().unwrap())
        .collect();
    ids.sort_unstable();
    assert_eq!(ids, questions);
    for card in cards {
        let qid = card["question"].as_str().unwrap();
        let a = &answers[qid];
        assert_eq!(card["answer"], chosen(a), "{qid}");
        let probs = a
            .get("probabilities")
            .or_else(|| a.get("distribution"))
            .and_then(Value::as_object)
            .expect("probabilities");
        let bars = card["bars"].as_array().unwrap();
        assert_eq!(bars.len(), probs.len(), "{qid}: one bar per option");
        for bar in bars {
            let option = bar["option"].as_str().unwrap();
            let p = probs[option]
                .as_f64()
                .expect("the bar's option is in the reply");
            assert!(
                (bar["probability"].as_f64().unwrap() - p).abs() < 1e-12,
                "{qid}/{option}"
            );
            let shown: f64 = bar["text"]
                .as_str()
                .unwrap()
                .trim_end_matches('%')
                .parse()
                .unwrap();
            assert!(
                (shown - p * 100.0).abs() <= 0.05 + 1e-9,
                "{qid}/{option}: {shown}% vs {p}"
            );
            let ratio = bar["ratio"].as_f64().unwrap();
            assert!(
                (ratio - p).abs() < 0.01,
                "{qid}/{option}: bar width {ratio} vs {p}"
            );
        }
        let h = a["normalized_entropy"]
            .as_f64()
            .expect("normalized_entropy");
        let (key, label) = expected_band(h);
        assert_eq!(card["band"], key, "{qid}: h = {h}");
        let band_text = card["bandText"].as_str().unwrap();
        assert!(
            band_text.contains(&format!("({label})")),
            "{qid}: {band_text}"
        );
        if samples > 1 {
            let agreement = card["agreement"].as_str().expect("agreement shown");
            let want = a["agreement"].as_f64().expect("agreement in the reply");
            assert!(
                agreement.contains(&format!("{:.1}%", want * 100.0)),
                "{qid}: {agreement} vs {want}"
            );
        }
    }
    for key in ["queue_ms", "forward_ms", "total_ms"] {
        let v = page["summary"][key].as_str().unwrap_or("—");
        assert!(v.ends_with(" ms"), "summary {key}: {v}");
    }
    assert_eq!(page["live"], "polite");
}

fn screenshot_path(name: &str) -> PathBuf {
    common::root().join("target").join(name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn studio_runs_a_decision_in_chromium() {
    let Some(model) = common::model() else {
        return;
    };
    if !runs(&chromium()) || !runs(&chromedriver()) {
        assert!(
            !server::ci(),
            "CI is set but chromium/chromedriver are missing (scripts/deps installs them)"
        );
        eprintln!("SKIP studio_runs_a_decision_in_chromium: install Debian `chromium` and `chromium-driver`");
        return;
    }
    let served = server::serve(&model, &["--studio"], Duration::from_secs(300)).await;
    let driver = start_driver().await;
    let c = browser(&driver).await;
    c.goto(&format!("{}/", served.base)).await.unwrap();
    c.wait()
        .at_most(Duration::from_secs(60))
        .for_element(Locator::Css("body[data-ready='true']"))
        .await
        .expect("the page loads the catalog");
    assert_eq!(c.title().await.unwrap(), "dgem Decision Studio");
    let error = c.find(Locator::Css("#form-error")).await.unwrap();
    assert!(!error.is_displayed().await.unwrap(), "no error on load");

    c.find(Locator::Css("#template"))
        .await
        .unwrap()
        .select_by_value("support_triage")
        .await
        .unwrap();
    let ticket = c.find(Locator::Css("#var-ticket")).await.unwrap();
    ticket.clear().await.unwrap();
    ticket
        .send_keys("I was charged twice for my subscription and need a refund today.")
        .await
        .unwrap();

    // A bad value: the error shows next to the form, nothing is sent.
    let samples = c.find(Locator::Css("#samples")).await.unwrap();
    samples.clear().await.unwrap();
    samples.send_keys("0").await.unwrap();
    c.find(Locator::Css("#run"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    assert!(error.is_displayed().await.unwrap());
    let msg = error.text().await.unwrap();
    assert!(msg.contains("samples") && msg.contains("\"0\""), "{msg}");

    // Run from the keyboard: Enter on the focused Run button.
    samples.clear().await.unwrap();
    samples.send_keys("2").await.unwrap();
    let run = c.find(Locator::Css("#run")).await.unwrap();
    run.send_keys(&char::from(Key::Enter).to_string())
        .await
        .unwrap();
    c.wait()
        .at_most(DECISION_TIMEOUT)
        .every(Duration::from_millis(250))
        .for_element(Locator::Css("#cards article.card"))
        .await
        .expect("answer cards appear");
    assert!(
        !error.is_displayed().await.unwrap(),
        "{}",
        error.text().await.unwrap()
    );

    let page = c.execute(READ_PAGE, vec![]).await.unwrap();
    check_cards(&page, 2, &["sentiment", "team", "urgent"]);
    // The embedded model's caveat is on the page in plain words, not only in
    // the raw JSON (it was missing from the page).
    let note = c.find(Locator::Css("#model-note")).await.unwrap();
    assert!(note.is_displayed().await.unwrap());
    let note = note.text().await.unwrap();
    assert!(note.contains("near chance"), "{note}");
    let png = c.screenshot().await.unwrap();
    assert_eq!(&png[1..4], b"PNG");
    std::fs::create_dir_all(screenshot_path("")).unwrap();
    std::fs::write(screenshot_path("studio-screenshot.png"), &png).unwrap();

    // A phone-sized window: no sideways scrolling, bars still match.
    c.set_window_size(390, 1600).await.unwrap();
    let overflow = c
        .execute(
            "return document.documentElement.scrollWidth - document.documentElement.clientWidth;",
            vec![],
        )
        .await
        .unwrap();
    assert!(
        overflow.as_f64().unwrap() <= 1.0,
        "narrow screen overflows by {overflow} px"
    );
    let page = c.execute(READ_PAGE, vec![]).await.unwrap();
    check_cards(&page, 2, &["sentiment", "team", "urgent"]);
    // The Run button is in view at the top of the page on a phone (a short
    // window, so the form is longer than the screen).
    c.set_window_size(390, 700).await.unwrap();
    let run_box = c
        .execute(
            "window.scrollTo(0, 0); const r = document.querySelector('#run').getBoundingClientRect(); return {top: r.top, bottom: r.bottom, h: window.innerHeight};",
            vec![],
        )
        .await
        .unwrap();
    assert!(
        run_box["bottom"].as_f64().unwrap() <= run_box["h"].as_f64().unwrap()
            && run_box["top"].as_f64().unwrap() >= 0.0,
        "Run is off screen: {run_box}"
    );
    c.set_window_size(390, 1600).await.unwrap();
    std::fs::write(
        screenshot_path("studio-screenshot-narrow.png"),
        c.screenshot().await.unwrap(),
    )
    .unwrap();
    eprintln!(
        "studio screenshots: {}",
        screenshot_path("studio-screenshot.png").display()
    );

    // Ad-hoc mode: the page's two default questions on a state, one sample.
    c.set_window_size(1280, 1800).await.unwrap();
    c.find(Locator::Css("input[name=mode][value=custom]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    samples.clear().await.unwrap();
    samples.send_keys("1").await.unwrap();
    c.find(Locator::Css("#run"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let started = Instant::now();
    loop {
        let shown = c
            .execute(
                "const d = document.querySelector('#summary [data-key=template] dd'); \
                 return d ? d.textContent : '';",
                vec![],
            )
            .await
            .unwrap();
        if shown == "custom_questions" {
            break;
        }
        assert!(
            started.elapsed() < DECISION_TIMEOUT,
            "no ad-hoc result; error box: {}",
            error.text().await.unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let page = c.execute(READ_PAGE, vec![]).await.unwrap();
    check_cards(&page, 1, &["team", "urgent"]);

    // Issue 15: the hesitant-answer options. Open the section, abstain on
    // every answer and ask for a cascade this server has no provider for:
    // each card says it is withheld, the summary says what the cascade did.
    c.find(Locator::Css("details.after summary"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let above = c.find(Locator::Css("#abstain-above")).await.unwrap();
    above.send_keys("0").await.unwrap();
    c.find(Locator::Css("#cascade-mode"))
        .await
        .unwrap()
        .select_by_value("entropy")
        .await
        .unwrap();
    c.find(Locator::Css("#run"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let started = Instant::now();
    let seen = loop {
        let seen = c
            .execute(
                "const cards = [...document.querySelectorAll('#cards article.card')];                  const c = document.querySelector('#summary [data-key=cascade] dd');                  return {abstained: cards.filter(a => a.dataset.abstained === 'true').length,                          cards: cards.length,                          note: (document.querySelector('#cards .abstained') || {}).textContent || '',                          cascade: c ? c.textContent : ''};",
                vec![],
            )
            .await
            .unwrap();
        if seen["abstained"].as_u64().unwrap_or(0) > 0 {
            break seen;
        }
        assert!(
            started.elapsed() < DECISION_TIMEOUT,
            "no abstained card; error box: {}",
            error.text().await.unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert_eq!(seen["abstained"], seen["cards"], "{seen}");
    let note = seen["note"].as_str().unwrap();
    assert!(
        note.starts_with("Abstained (") && note.contains("do not act on it"),
        "{note}"
    );
    assert!(
        seen["cascade"].as_str().unwrap().contains("configured"),
        "{seen}"
    );

    // Images: a file input shows each picked image as a thumbnail; the
    // embedded model has no vision, so the run is refused in plain words.
    above.clear().await.unwrap();
    c.find(Locator::Css("#cascade-mode"))
        .await
        .unwrap()
        .select_by_value("")
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let png = dir.path().join("dot.png");
    std::fs::write(&png, PNG_1X1).unwrap();
    c.find(Locator::Css("#images"))
        .await
        .unwrap()
        .send_keys(png.to_str().unwrap())
        .await
        .unwrap();
    c.wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::Css("#thumbs li img"))
        .await
        .expect("a thumbnail of the picked image");
    let thumb = c
        .execute(
            "const i = document.querySelector('#thumbs li img'); return {alt: i.alt, src: i.src.slice(0, 22), w: i.getBoundingClientRect().width};",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(thumb["alt"], "dot.png", "{thumb}");
    assert_eq!(thumb["src"], "data:image/png;base64,", "{thumb}");
    assert!(thumb["w"].as_f64().unwrap() > 50.0, "{thumb}");
    c.find(Locator::Css("#run"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    c.wait()
        .at_most(Duration::from_secs(60))
        .for_element(Locator::Css("#form-error:not([hidden])"))
        .await
        .expect("the refusal shows next to the form");
    let msg = error.text().await.unwrap();
    assert!(msg.contains("has no vision"), "{msg}");
    let cards = c
        .execute(
            "return document.querySelectorAll('#cards article').length;",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(cards, json!(0), "old results are cleared on a new error");
    c.find(Locator::Css("#thumbs li .remove"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let left = c
        .execute(
            "return document.querySelectorAll('#thumbs li').length;",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(left, json!(0), "the remove button drops the image");

    // Issue 40: a multi question with "none of these" reads as checkboxes
    // beside bars of each option's own probability of applying; the ticks
    // are the reply's selection.
    c.execute(
        "const f = document.querySelector('#questions fieldset'); \
         f.querySelector('[name=qtype]').value = 'multi'; \
         f.querySelector('[name=qoptions]').value = 'billing, refund, outage'; \
         f.querySelector('[name=qnone]').checked = true; return true;",
        vec![],
    )
    .await
    .unwrap();
    c.find(Locator::Css("#run"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    c.wait()
        .at_most(DECISION_TIMEOUT)
        .every(Duration::from_millis(250))
        .for_element(Locator::Css("#cards ul.bars.multi"))
        .await
        .expect("a multi answer card appears");
    let multi = c
        .execute(
            "const raw = JSON.parse(document.querySelector('#raw-json').textContent); \
             const card = document.querySelector('#cards ul.bars.multi').closest('article'); \
             return {raw: raw.answers[card.dataset.question], \
                     answer: card.querySelector('.chosen').textContent, \
                     ticks: [...card.querySelectorAll('li')].map((li) => [li.dataset.option, li.querySelector('input').checked, Number(li.dataset.probability)])};",
            vec![],
        )
        .await
        .unwrap();
    let raw = &multi["raw"];
    assert_eq!(raw["type"], "multi", "{multi}");
    let selected: Vec<&str> = raw["multi"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    let ticks = multi["ticks"].as_array().unwrap();
    let options: Vec<&str> = ticks.iter().map(|t| t[0].as_str().unwrap()).collect();
    assert_eq!(options, ["billing", "refund", "outage", "none"], "{multi}");
    for t in ticks {
        let name = t[0].as_str().unwrap();
        assert_eq!(t[1].as_bool().unwrap(), selected.contains(&name), "{multi}");
        assert_eq!(t[2], raw["probabilities"][name], "{multi}");
    }
    let shown = if selected.is_empty() {
        "none selected".to_string()
    } else {
        selected.join(", ")
    };
    assert_eq!(multi["answer"], json!(shown), "{multi}");

    // A long run (32 samples) shows its elapsed time and can be cancelled.
    samples.clear().await.unwrap();
    samples.send_keys("32").await.unwrap();
    c.find(Locator::Css("#run"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let cancel = c.find(Locator::Css("#cancel")).await.unwrap();
    assert!(
        cancel.is_displayed().await.unwrap(),
        "Cancel shows during a run"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let ticking = c
        .find(Locator::Css("#elapsed"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(ticking.ends_with(" s"), "elapsed time: {ticking}");
    cancel.click().await.unwrap();
    c.wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::XPath(
            "//p[@id='results-status'][starts-with(., 'Cancelled after')]",
        ))
        .await
        .expect("the run is cancelled");
    assert!(!cancel.is_displayed().await.unwrap(), "Cancel hides again");
    assert!(
        !error.is_displayed().await.unwrap(),
        "a cancel is not an error"
    );
    c.close().await.unwrap();
    drop(driver);
    drop(served);
}
