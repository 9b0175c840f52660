//! Reputation files: a malformed one fails start naming file and line; on
//! reload the old lists stay in force; a fixed file is picked up, also by
//! the background reload task.

use std::path::Path;
use std::time::Duration;

use crate::support::bots::*;
use anteroom::bots::{BotDefence, BotsConfig, BotsError, RateLimits, ReputationFiles};

fn config(file: &Path) -> BotsConfig {
    BotsConfig {
        reputation: ReputationFiles {
            datacenter: Some(file.to_owned()),
            ..ReputationFiles::default()
        },
        ..BotsConfig::default()
    }
}

fn reasons(d: &BotDefence, addr: &str) -> Vec<&'static str> {
    d.assess(&signals(d, &chrome(), addr)).reasons
}

#[test]
fn malformed_file_fails_start_with_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("dc.txt");
    std::fs::write(&file, "# cloud\n198.51.100.0/24\n\n10.0.0.0/33\n").unwrap();
    let err = BotDefence::new(&config(&file), RateLimits::default(), keyring())
        .err()
        .unwrap();
    assert!(
        matches!(err, BotsError::ReputationParse { line: 4, .. }),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(text.contains("dc.txt") && text.contains("line 4"), "{text}");
}

#[test]
fn missing_file_fails_start() {
    let dir = tempfile::tempdir().unwrap();
    let err = BotDefence::new(
        &config(&dir.path().join("nope.txt")),
        RateLimits::default(),
        keyring(),
    );
    assert!(matches!(err, Err(BotsError::ReputationRead { .. })));
}

#[test]
fn reload_keeps_the_old_list_when_the_new_one_is_malformed() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("dc.txt");
    std::fs::write(&file, "198.51.100.0/24\n").unwrap();
    let d = defence(&config(&file));
    assert_eq!(reasons(&d, "198.51.100.7"), ["datacenter_ip"]);

    std::fs::write(&file, "203.0.113.0/24\nnot-an-ip\n").unwrap();
    let err = d.reload().unwrap_err();
    assert!(err.to_string().contains("line 2"), "{err}");
    assert_eq!(
        reasons(&d, "198.51.100.7"),
        ["datacenter_ip"],
        "old list kept"
    );
    assert!(reasons(&d, "203.0.113.7").is_empty());

    std::fs::write(&file, "203.0.113.0/24\n").unwrap();
    d.reload().unwrap();
    assert!(reasons(&d, "198.51.100.7").is_empty());
    assert_eq!(reasons(&d, "203.0.113.7"), ["datacenter_ip"]);
}

#[tokio::test]
async fn background_reload_picks_up_changes_and_survives_bad_files() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("dc.txt");
    std::fs::write(&file, "198.51.100.0/24\n").unwrap();
    let d = defence(&config(&file));
    let task = d.spawn_reload(Duration::from_millis(20));

    std::fs::write(&file, "garbage line\n").unwrap();
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert_eq!(
        reasons(&d, "198.51.100.7"),
        ["datacenter_ip"],
        "old list kept"
    );

    std::fs::write(&file, "198.51.100.0/24\n203.0.113.0/24\n").unwrap();
    let picked_up = async {
        while reasons(&d, "203.0.113.7").is_empty() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(5), picked_up)
        .await
        .unwrap();
    drop(d);
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .unwrap()
        .unwrap();
}
