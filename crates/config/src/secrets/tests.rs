use std::path::{Path, PathBuf};

use super::*;

/// A value that must never show up in any message.
const SENTINEL: &str = "sk-SENTINEL-4242";

fn pairs(vars: &[(String, Secret)]) -> Vec<(&str, &str)> {
    vars.iter()
        .map(|(key, value)| (key.as_str(), value.expose()))
        .collect()
}

fn dotenv(text: &str) -> Result<Vec<(String, Secret)>, SecretsError> {
    parse_dotenv(text, Path::new(".env"))
}

fn dotenv_error(text: &str) -> String {
    match dotenv(text) {
        Ok(vars) => panic!("expected an error, parsed {:?}", pairs(&vars)),
        Err(err) => err.to_string(),
    }
}

/// A scratch folder of this test process, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> std::io::Result<Self> {
        let dir =
            std::env::temp_dir().join(format!("mcpvisor-secrets-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        Ok(Self(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn def_with(env_file: &Path, keys: &[&str]) -> ServerDef {
    ServerDef {
        env_file: Some(env_file.to_owned()),
        env_keys: keys.iter().map(|k| (*k).to_owned()).collect(),
        ..ServerDef::new("s", "cmd")
    }
}

#[test]
fn dotenv_dialect() -> Result<(), SecretsError> {
    let vars = dotenv(concat!(
        "\u{feff}# comment\n",
        "\n",
        "PLAIN=value\n",
        "  SPACED = padded value  \n",
        "export EXPORTED=yes\n",
        "export=the key is export\n",
        "HASH=abc#def # trailing comment\n",
        "EMPTY=\n",
        "SINGLE='lit $HOME \\n # not comment'\n",
        "DOUBLE=\"a\\tb\\nc \\\"q\\\" \\$HOME \\x\" # comment\n",
        "EQUALS=a=b=c\n",
        "CRLF=windows\r\n",
        "PEM=\"-----BEGIN KEY-----\n",
        "abc\n",
        "-----END KEY-----\"\n",
        "AFTER=1\n",
        "PLAIN=overridden",
    ))?;
    assert_eq!(
        pairs(&vars),
        [
            ("PLAIN", "overridden"),
            ("SPACED", "padded value"),
            ("EXPORTED", "yes"),
            ("export", "the key is export"),
            ("HASH", "abc#def"),
            ("EMPTY", ""),
            ("SINGLE", "lit $HOME \\n # not comment"),
            ("DOUBLE", "a\tb\nc \"q\" $HOME \\x"),
            ("EQUALS", "a=b=c"),
            ("CRLF", "windows"),
            ("PEM", "-----BEGIN KEY-----\nabc\n-----END KEY-----"),
            ("AFTER", "1"),
        ]
    );
    Ok(())
}

#[test]
fn dotenv_syntax_errors_name_the_line_not_the_value() {
    assert_eq!(
        dotenv_error(&format!("A=1\n{SENTINEL}\n")),
        ".env:2: expected KEY=VALUE"
    );
    assert_eq!(
        dotenv_error(&format!("A=1\n\n= {SENTINEL}\n")),
        ".env:3: the variable name is empty"
    );
    assert_eq!(
        dotenv_error(&format!("MY KEY={SENTINEL}\n")),
        ".env:1: invalid variable name \"MY KEY\""
    );
    assert_eq!(
        dotenv_error(&format!("A=1\nTOKEN=\"{SENTINEL}\nB=2\n")),
        ".env:2: unterminated \" quote in \"TOKEN\""
    );
    assert_eq!(
        dotenv_error(&format!("K='a\nb' {SENTINEL}\nC=3\n")),
        ".env:2: unexpected text after the closing quote of \"K\""
    );
    assert_eq!(
        dotenv_error("A=1\nNUL=\"a\0b\"\n"),
        ".env:2: the value of \"NUL\" contains a NUL byte"
    );
}

#[test]
fn line_numbers_count_multi_line_values() {
    assert_eq!(
        dotenv_error("PEM=\"a\nb\nc\"\nbroken\n"),
        ".env:4: expected KEY=VALUE"
    );
}

#[test]
fn resolve_env_reads_the_file_fresh_each_time() -> Result<(), Box<dyn std::error::Error>> {
    let scratch = Scratch::new("fresh")?;
    let file = scratch.0.join("secrets.env");
    std::fs::write(&file, "GITHUB_TOKEN=one\nOTHER=x\n")?;
    let def = def_with(&file, &["GITHUB_TOKEN"]);
    assert_eq!(pairs(&resolve_env(&def)?), [("GITHUB_TOKEN", "one")]);

    std::fs::write(&file, "GITHUB_TOKEN=two\nOTHER=x\nLATE=added\n")?;
    assert_eq!(pairs(&resolve_env(&def)?), [("GITHUB_TOKEN", "two")]);
    let def = def_with(&file, &["LATE", "GITHUB_TOKEN"]);
    assert_eq!(
        pairs(&resolve_env(&def)?),
        [("LATE", "added"), ("GITHUB_TOKEN", "two")]
    );
    Ok(())
}

#[test]
fn empty_env_keys_means_every_key() -> Result<(), Box<dyn std::error::Error>> {
    let scratch = Scratch::new("all")?;
    let file = scratch.0.join(".env");
    std::fs::write(&file, "B=2\nA=1\n")?;
    assert_eq!(
        pairs(&resolve_env(&def_with(&file, &[]))?),
        [("B", "2"), ("A", "1")]
    );
    Ok(())
}

#[test]
fn no_env_file_contributes_nothing() -> Result<(), SecretsError> {
    assert!(resolve_env(&ServerDef::new("s", "cmd"))?.is_empty());
    Ok(())
}

#[test]
fn missing_keys_and_files_are_errors() -> Result<(), Box<dyn std::error::Error>> {
    let scratch = Scratch::new("missing")?;
    let file = scratch.0.join(".env");
    std::fs::write(&file, format!("PRESENT={SENTINEL}\n"))?;

    let err = resolve_env(&def_with(&file, &["PRESENT", "API_KEY"])).map(drop);
    let err = err.err().ok_or("expected an error")?;
    assert_eq!(
        err.to_string(),
        format!(
            "{}: \"API_KEY\" (listed in env_keys) is not set in this file",
            file.display()
        )
    );
    assert!(!format!("{err:?}").contains(SENTINEL));

    let err = resolve_env(&def_with(&file, &["A", "PRESENT", "B"])).map(drop);
    let err = err.err().ok_or("expected an error")?;
    assert_eq!(
        err.to_string(),
        format!(
            "{}: \"A\", \"B\" (listed in env_keys) are not set in this file",
            file.display()
        )
    );

    let gone = scratch.0.join("gone.env");
    let err = resolve_env(&def_with(&gone, &[])).map(drop);
    let err = err.err().ok_or("expected an error")?;
    assert_eq!(
        err.to_string(),
        format!(
            "{}: cannot read env file: No such file or directory (os error 2)",
            gone.display()
        )
    );
    Ok(())
}

#[test]
fn inline_env() -> Result<(), SecretsError> {
    let (key, value) = parse_inline("API_KEY=a=b")?;
    assert_eq!((key.as_str(), value.expose()), ("API_KEY", "a=b"));
    let (key, value) = parse_inline("EMPTY=")?;
    assert_eq!((key.as_str(), value.expose()), ("EMPTY", ""));

    let message = |arg: &str| parse_inline(arg).map(drop).map_err(|e| e.to_string());
    assert_eq!(
        message(SENTINEL),
        Err("--env: expected KEY=VALUE (no \"=\" found)".to_owned())
    );
    assert_eq!(
        message(&format!("={SENTINEL}")),
        Err("--env: the variable name is empty".to_owned())
    );
    assert_eq!(
        message("A B=1"),
        Err("--env: invalid variable name \"A B\"".to_owned())
    );
    assert_eq!(
        message("K=a\0b"),
        Err("--env: the value of \"K\" contains a NUL byte".to_owned())
    );
    Ok(())
}

#[test]
fn secrets_never_print_their_value() {
    let secret = Secret::new(SENTINEL);
    assert_eq!(format!("{secret}"), "***");
    assert_eq!(format!("{secret:?}"), "***");
    assert_eq!(format!("{:?}", ("KEY", &secret)), "(\"KEY\", ***)");
    assert_eq!(AsRef::<OsStr>::as_ref(&secret), OsStr::new(SENTINEL));
    assert_eq!(Secret::from(SENTINEL.to_owned()).into_inner(), SENTINEL);
}

#[test]
fn no_error_or_debug_output_contains_a_value() {
    let inputs = [
        format!("A=1\n{SENTINEL}\n"),
        format!("A = \"{SENTINEL}"),
        format!("A = '{SENTINEL}"),
        format!("A=\"{SENTINEL}\" {SENTINEL}"),
        format!("A=\"{SENTINEL}\0\""),
        format!("BAD KEY={SENTINEL}"),
        format!("={SENTINEL}"),
        format!("TOKEN={SENTINEL}\nQ=\"{SENTINEL}\"\n"),
    ];
    for input in inputs {
        let output = match dotenv(&input) {
            Ok(vars) => format!("{vars:?}"),
            Err(err) => format!("{err} {err:?}"),
        };
        assert!(!output.contains(SENTINEL), "{input:?} gave {output}");
    }
    for arg in [
        SENTINEL.to_owned(),
        format!("={SENTINEL}"),
        format!("K={SENTINEL}\0"),
    ] {
        let output = match parse_inline(&arg) {
            Ok(pair) => format!("{pair:?}"),
            Err(err) => format!("{err} {err:?}"),
        };
        assert!(!output.contains(SENTINEL), "{arg:?} gave {output}");
    }
}

#[test]
fn header_placeholders_come_from_the_env_file_at_every_call()
-> Result<(), Box<dyn std::error::Error>> {
    let dir = Scratch::new("headers")?;
    let file = dir.0.join("remote.env");
    std::fs::write(&file, format!("TOKEN={SENTINEL}\n"))?;
    let mut def = ServerDef::remote("r", "http://127.0.0.1:1/mcp");
    def.env_file = Some(file.clone());
    def.headers
        .insert("Authorization".into(), "Bearer ${TOKEN}".into());
    def.headers
        .insert("X-Team".into(), "${env:MCPVISOR_TEST_TEAM}-$plain".into());
    def.env.insert("MCPVISOR_TEST_TEAM".into(), "blue".into());
    let headers = expand_headers(&def)?;
    assert_eq!(
        pairs(&headers),
        [
            ("Authorization", format!("Bearer {SENTINEL}").as_str()),
            ("X-Team", "blue-$plain")
        ]
    );
    // The file is read again: a rotated token is used by the next call.
    std::fs::write(&file, "TOKEN=rotated\n")?;
    assert_eq!(expand_headers(&def)?[0].1.expose(), "Bearer rotated");

    def.headers
        .insert("X-Missing".into(), "${MCPVISOR_TEST_UNSET_VAR}".into());
    let err = expand_headers(&def).map(drop).map_err(|e| e.to_string());
    assert_eq!(
        err,
        Err(
            "header \"X-Missing\" needs ${MCPVISOR_TEST_UNSET_VAR}, which is set neither in \
             env_file, env, nor the environment"
                .to_owned()
        )
    );
    def.headers.remove("X-Missing");
    def.headers.insert("X-Open".into(), "${TOKEN".into());
    let err = expand_headers(&def).map(drop).map_err(|e| e.to_string());
    assert!(
        err.as_ref().is_err_and(|e| !e.contains("rotated")),
        "{err:?}"
    );
    Ok(())
}
