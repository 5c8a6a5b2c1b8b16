//! `hotprefix session --requests -` driven the way a chat client drives it: one request a line on
//! standard input, each answered before the next is written, with the model's own replies put
//! back into the history, in a context window small enough to overflow several times.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use serde_json::{json, Value};

fn repo() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// ~600 characters of the public long document.
fn document() -> String {
    let path = repo().join("tests/data/reference/prompts-public.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("missing test data {}: {e}", path.display()));
    let spec: Value = serde_json::from_str(&text).unwrap();
    let p = spec["prompts"].as_array().unwrap().iter().find(|p| p["id"] == "pub-10-longdoc-qa").unwrap();
    let content = p["messages"][1]["content"].as_str().unwrap();
    let start = content.find("<document>").unwrap();
    content[start..].chars().take(600).collect()
}

const QUESTIONS: [&str; 14] = [
    "What is this document about?",
    "Who tried to build the canal first?",
    "Why did they fail?",
    "Who finished it?",
    "When did it open?",
    "What did the workers suffer from?",
    "How was disease fought?",
    "Which country controls the canal today?",
    "Is the canal long?",
    "What are locks?",
    "Why are locks needed?",
    "Name one ship type that uses it.",
    "What happens in a drought?",
    "Thank you. Summarise in five words.",
];

#[test]
fn a_long_chat_through_session_stdin_reuses_every_turn_and_overflows_rarely() {
    let model = repo().join("models/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(model.exists(), "missing test data: {} (run scripts/fetch-model.sh)", model.display());
    let mut child = Command::new(env!("CARGO_BIN_EXE_hotprefix"))
        .args(["session", "--requests", "-", "--context", "512", "--kv-budget-mb", "32", "--model"])
        .arg(&model)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start hotprefix session");
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut ask = |request: &Value| -> Value {
        writeln!(stdin, "{request}").unwrap();
        stdin.flush().unwrap();
        let mut line = String::new();
        stdout.read_line(&mut line).expect("a result line");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line:?}"))
    };
    let system = json!({"role": "system", "content": "Answer briefly from the document."});
    let doc = json!({"role": "user", "content": document(), "pinned": true});

    // Prewarm the static prefix while "the user types".
    let warm = ask(&json!({"messages": [system, doc], "max_tokens": 0}));
    assert_eq!(warm["usage"]["completion_tokens"], 0, "{warm}");
    let static_tokens = warm["usage"]["prompt_tokens"].as_u64().unwrap();

    // A bad line in the middle gets an error object and the session goes on.
    let bad = ask(&json!({"messages": "not a list"}));
    assert_eq!(bad["error"]["type"], "InvalidArgumentError", "{bad}");

    let mut history: Vec<Value> = vec![system, doc];
    let (mut overflows, mut last_dropped) = (0, 0);
    let mut left_resident: Option<u64> = None;
    for (turn, q) in QUESTIONS.iter().enumerate() {
        history.push(json!({"role": "user", "content": q}));
        let r = ask(&json!({"messages": history, "max_tokens": 24, "temperature": 0}));
        assert!(r.get("error").is_none(), "turn {turn}: {r}");
        let cached = r["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap();
        let dropped = r["cache"]["dropped_messages"].as_u64().unwrap();
        if dropped != last_dropped {
            overflows += 1;
            assert!(
                cached + 3 >= static_tokens,
                "turn {turn} overflowed: {cached} cached, the pinned prefix is {static_tokens} tokens: {r}"
            );
        } else if let Some(resident) = left_resident {
            assert!(cached >= resident, "turn {turn}: {cached} cached, the previous turn left {resident} resident: {r}");
        } else {
            assert!(cached + 3 >= static_tokens, "turn {turn}: the prewarmed prefix is reused: {r}");
        }
        println!("turn {turn}: {} prompt tokens, {cached} cached, {dropped} messages dropped", r["usage"]["prompt_tokens"]);
        last_dropped = dropped;
        // What this turn leaves resident: its prompt and the completion tokens fed back (all but
        // the last when it stopped at max_tokens).
        let completion = r["usage"]["completion_tokens"].as_u64().unwrap();
        let fed = if r["finish_reason"] == "length" { completion - 1 } else { completion };
        left_resident = Some(r["usage"]["prompt_tokens"].as_u64().unwrap() + fed);
        history.push(json!({"role": "assistant", "content": r["text"]}));
    }
    println!("{} turns, {overflows} overflows, pinned prefix {static_tokens} tokens", QUESTIONS.len());
    drop(stdin);
    assert!(child.wait().unwrap().success());
    assert!(overflows >= 2, "the context window overflowed {overflows} times: the test must exercise overflows");
    assert!(overflows * 3 <= QUESTIONS.len(), "{overflows} overflows in {} turns: not rare", QUESTIONS.len());
}

/// The report's three requests (a prompt shorter than a KV page, prewarmed, then answered twice)
/// with a line that is not UTF-8, blank lines, and a line with a field hotprefix does not
/// implement in between: the bad lines get one error object each, blank lines nothing, and the
/// third request still reuses the prompt.
#[test]
fn bad_and_blank_lines_do_not_end_the_session_and_a_short_prompt_keeps_hitting() {
    let model = repo().join("models/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(model.exists(), "missing test data: {} (run scripts/fetch-model.sh)", model.display());
    let req = |max: u32| {
        json!({"messages": [{"role": "system", "content": ""}, {"role": "user", "content": "hi"}], "max_tokens": max}).to_string()
    };
    let mut input: Vec<u8> = Vec::new();
    for line in [req(0), req(8)] {
        input.extend_from_slice(line.as_bytes());
        input.push(b'\n');
    }
    input.extend_from_slice(b"{\"messages\": [{\"role\": \"user\", \"content\": \"caf\xe9\"}]}\n");
    input.extend_from_slice(b"   \n\n\t\r\n");
    let unsupported = json!({"messages": [{"role": "user", "content": "hi"}], "logprobs": true});
    input.extend_from_slice(format!("{unsupported}\n{}\n", req(8)).as_bytes());
    let mut child = Command::new(env!("CARGO_BIN_EXE_hotprefix"))
        .args(["session", "--requests", "-", "--model"])
        .arg(&model)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start hotprefix session");
    child.stdin.take().unwrap().write_all(&input).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "the session ended with {}", out.status);
    let lines: Vec<Value> = String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 5, "one answer a non-blank line: {lines:#?}");
    let cached = |v: &Value| v["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64();
    let prompt = lines[0]["usage"]["prompt_tokens"].as_u64().unwrap();
    assert!(prompt < 16, "the prompt ({prompt} tokens) is shorter than a KV page of 16");
    assert_eq!(cached(&lines[1]), Some(prompt - 1), "{}", lines[1]);
    assert_eq!(lines[2]["error"]["type"], "InvalidArgumentError", "{}", lines[2]);
    assert!(lines[2]["error"]["message"].as_str().unwrap().contains("not valid UTF-8"), "{}", lines[2]);
    assert_eq!(lines[3]["error"]["type"], "InvalidArgumentError", "{}", lines[3]);
    assert!(lines[3]["error"]["message"].as_str().unwrap().contains("`logprobs`"), "{}", lines[3]);
    assert_eq!(cached(&lines[4]), Some(prompt - 1), "the third request reuses the prompt: {}", lines[4]);
    assert_eq!(lines[4]["text"], lines[1]["text"]);
}
