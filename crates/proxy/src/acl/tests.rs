use super::category::bits;
use super::*;

fn cat(name: &str) -> u32 {
    bits(name).unwrap()
}

fn alice() -> User {
    parse(
        "alice",
        "on >alice-pw ~alice:* &chan:* +@read +@write -@dangerous",
    )
    .unwrap()
}

#[test]
fn passwords_on_off_and_hashes() {
    let a = alice();
    assert!(a.accepts(b"alice-pw"));
    assert!(!a.accepts(b"alice-pw "));
    assert!(!a.accepts(b""));
    let off = parse("bob", "off >pw").unwrap();
    assert!(!off.accepts(b"pw"));
    // #sha256 of "pw", as `echo -n pw | sha256sum` prints it.
    let hashed = parse(
        "carol",
        "on #30c952fab122c3f9759f02a6d95c3758b246b4fee239957b2d4fee46e26170c4",
    )
    .unwrap();
    assert!(hashed.accepts(b"pw"));
    let removed = parse("dave", "on >a >b <a").unwrap();
    assert!(!removed.accepts(b"a"));
    assert!(removed.accepts(b"b"));
    let open = parse("eve", "on nopass").unwrap();
    assert!(open.accepts(b"anything"));
    assert!(!parse("eve", "on nopass resetpass").unwrap().accepts(b"x"));
}

#[test]
fn commands_by_name_and_category_last_rule_wins() {
    let a = alice();
    let get = cat("read") | cat("string") | cat("fast");
    let set = cat("write") | cat("string") | cat("slow");
    let flushall = cat("keyspace") | cat("write") | cat("slow") | cat("dangerous");
    let keys = cat("keyspace") | cat("read") | cat("slow") | cat("dangerous");
    let config = cat("admin") | cat("slow") | cat("dangerous");
    assert!(a.may_run("get", get));
    assert!(a.may_run("set", set));
    assert!(!a.may_run("flushall", flushall));
    assert!(!a.may_run("keys", keys));
    assert!(!a.may_run("config|get", config));
    assert!(!a.may_run("client|kill", cat("admin") | cat("dangerous")));
    let some = parse("x", "on -@all +get +client|list").unwrap();
    assert!(some.may_run("get", get));
    assert!(!some.may_run("set", set));
    assert!(some.may_run("client|list", cat("admin")));
    assert!(!some.may_run("client|kill", cat("admin")));
    let all_but = parse("x", "on allcommands -flushall -client").unwrap();
    assert!(all_but.may_run("keys", keys));
    assert!(!all_but.may_run("flushall", flushall));
    assert!(!all_but.may_run("client|list", cat("slow")));
    assert!(!parse("x", "on").unwrap().may_run("get", get));
}

#[test]
fn keys_by_pattern_and_access() {
    let a = alice();
    assert!(a.may_access_key(b"alice:1", Access::READ));
    assert!(a.may_access_key(b"alice:1", Access::WRITE));
    assert!(!a.may_access_key(b"bob:x", Access::READ));
    let split = parse("x", "on %R~cache:* %W~out:* ~both:*").unwrap();
    assert!(split.may_access_key(b"cache:1", Access::READ));
    assert!(!split.may_access_key(b"cache:1", Access::WRITE));
    assert!(split.may_access_key(b"out:1", Access::WRITE));
    assert!(!split.may_access_key(b"out:1", Access::READ_WRITE));
    assert!(split.may_access_key(b"both:1", Access::READ_WRITE));
    let reset = parse("x", "on allkeys resetkeys ~only:*").unwrap();
    assert!(!reset.may_access_key(b"other", Access::READ));
    assert!(reset.may_access_key(b"only:1", Access::READ));
    // EXISTS asks for neither: any pattern that matches will do.
    assert!(split.may_access_key(b"out:1", Access::NONE));
    assert!(!split.may_access_key(b"elsewhere", Access::NONE));
}

#[test]
fn key_spec_flags_ask_as_redis_decides() {
    assert_eq!(Access::of_key_spec(["RO", "ACCESS"]), Access::READ);
    assert_eq!(Access::of_key_spec(["OW", "UPDATE"]), Access::WRITE);
    assert_eq!(Access::of_key_spec(["RM", "delete"]), Access::WRITE);
    assert_eq!(
        Access::of_key_spec(["RW", "ACCESS", "UPDATE", "VARIABLE_FLAGS"]),
        Access::READ_WRITE
    );
    assert_eq!(Access::of_key_spec(["RO"]), Access::NONE);
}

#[test]
fn channels_and_patterns() {
    let a = alice();
    assert!(a.may_use_channel(b"chan:news", false));
    assert!(!a.may_use_channel(b"other", false));
    // PSUBSCRIBE needs the very pattern.
    assert!(a.may_use_channel(b"chan:*", true));
    assert!(!a.may_use_channel(b"chan:n*", true));
    let all = parse("x", "on allchannels").unwrap();
    assert!(all.may_use_channel(b"*", true));
}

#[test]
fn password_only_users_may_do_everything() {
    let u = User::with_password("bob", "pw");
    assert!(u.accepts(b"pw"));
    assert!(u.is_unrestricted());
    assert!(u.may_run("flushall", cat("dangerous")));
    assert!(u.may_access_key(b"anything", Access::READ_WRITE));
    assert!(u.may_use_channel(b"any*", true));
    assert!(!alice().is_unrestricted());
    assert!(
        parse("x", "on >p allkeys allchannels allcommands")
            .unwrap()
            .is_unrestricted()
    );
    assert!(
        !parse("x", "on allkeys allchannels allcommands -get")
            .unwrap()
            .is_unrestricted()
    );
    // Every key and channel, but only some commands: checked.
    for rules in ["on ~* &* +@read", "on ~* &* +get +set", "on ~* &*"] {
        assert!(!parse("x", rules).unwrap().is_unrestricted(), "{rules}");
    }
}

#[test]
fn bad_rules_are_named() {
    for (rules, reason) in [
        ("on +@nope", "Unknown command or category name in ACL"),
        ("on frobnicate", "Syntax error"),
        (
            "on #abc",
            "The password hash must be exactly 64 characters and contain only lowercase hexadecimal characters",
        ),
        ("on %X~k", "Syntax error"),
        ("on (~k +get)", "selectors are not supported by orthrus"),
    ] {
        let err = parse("x", rules).unwrap_err();
        assert_eq!(err.reason, reason, "{rules}");
    }
    assert_eq!(
        parse("x", "on +@nope").unwrap_err().to_string(),
        "Error in ACL SETUSER modifier '+@nope': Unknown command or category name in ACL"
    );
}

#[test]
fn acl_list_lines_and_noperm_texts() {
    assert_eq!(
        parse("a", "on nopass ~k:* +@read -keys")
            .unwrap()
            .describe(),
        "user a on nopass ~k:* resetchannels +@read -keys"
    );
    assert_eq!(
        Denied::Command.message("alice", "flushall"),
        "NOPERM User alice has no permissions to run the 'flushall' command"
    );
    assert_eq!(
        Denied::Key.message("a", "get"),
        "NOPERM No permissions to access a key"
    );
}
