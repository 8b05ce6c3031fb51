//! The command table: what `COMMAND`, `COMMAND INFO/DOCS/COUNT` report and what
//! arity checks use. Arity follows Redis: n > 0 exactly n arguments (the name
//! included), n < 0 at least |n|.

/// One command (or subcommand) as Redis describes it.
pub struct Spec {
    /// Lower-case name (`client|setname` style for subcommands is built on demand).
    pub name: &'static str,
    /// Redis arity.
    pub arity: i32,
    /// Command flags (`write`, `readonly`, `fast`, ...).
    pub flags: &'static [&'static str],
    /// First key argument, last (-1: the last argument), step; 0 0 0 for none.
    pub keys: (i32, i32, i32),
    /// Redis command group.
    pub group: &'static str,
    /// Redis version the command appeared in.
    pub since: &'static str,
    /// One line for `COMMAND DOCS` (and redis-cli's help).
    pub summary: &'static str,
    /// Subcommands (containers only).
    pub subs: &'static [Spec],
}

const fn c(
    name: &'static str,
    arity: i32,
    flags: &'static [&'static str],
    keys: (i32, i32, i32),
    group: &'static str,
    since: &'static str,
    summary: &'static str,
) -> Spec {
    Spec {
        name,
        arity,
        flags,
        keys,
        group,
        since,
        summary,
        subs: &[],
    }
}

const NONE: (i32, i32, i32) = (0, 0, 0);
const ONE: (i32, i32, i32) = (1, 1, 1);
const ALL: (i32, i32, i32) = (1, -1, 1);
const PAIRS: (i32, i32, i32) = (1, -1, 2);
const W: &[&str] = &["write", "denyoom"];
const WF: &[&str] = &["write", "denyoom", "fast"];
const RF: &[&str] = &["readonly", "fast"];
const CONN: &[&str] = &["noscript", "loading", "stale", "fast"];
const NOAUTH: &[&str] = &["noscript", "loading", "stale", "fast", "no_auth"];

static CLIENT_SUBS: [Spec; 6] = [
    c(
        "getname",
        2,
        CONN,
        NONE,
        "connection",
        "2.6.9",
        "Returns the name of the connection.",
    ),
    c(
        "id",
        2,
        CONN,
        NONE,
        "connection",
        "5.0.0",
        "Returns the unique client ID of the connection.",
    ),
    c(
        "info",
        2,
        CONN,
        NONE,
        "connection",
        "6.2.0",
        "Returns information about the connection.",
    ),
    c(
        "setinfo",
        4,
        CONN,
        NONE,
        "connection",
        "7.2.0",
        "Sets information specific to the client or connection.",
    ),
    c(
        "setname",
        3,
        CONN,
        NONE,
        "connection",
        "2.6.9",
        "Sets the connection name.",
    ),
    c(
        "help",
        2,
        CONN,
        NONE,
        "connection",
        "5.0.0",
        "Returns helpful text about the different subcommands.",
    ),
];
static COMMAND_SUBS: [Spec; 4] = [
    c(
        "count",
        2,
        CONN,
        NONE,
        "server",
        "2.8.13",
        "Returns a count of commands.",
    ),
    c(
        "docs",
        -2,
        CONN,
        NONE,
        "server",
        "7.0.0",
        "Returns documentary information about one, multiple or all commands.",
    ),
    c(
        "info",
        -2,
        CONN,
        NONE,
        "server",
        "2.8.13",
        "Returns information about one, multiple or all commands.",
    ),
    c(
        "help",
        2,
        CONN,
        NONE,
        "server",
        "5.0.0",
        "Returns helpful text about the different subcommands.",
    ),
];
static CONFIG_SUBS: [Spec; 2] = [
    c(
        "get",
        -3,
        &["admin", "noscript", "loading", "stale"],
        NONE,
        "server",
        "2.0.0",
        "Returns the effective values of configuration parameters.",
    ),
    c(
        "help",
        2,
        CONN,
        NONE,
        "server",
        "5.0.0",
        "Returns helpful text about the different subcommands.",
    ),
];

const fn container(
    name: &'static str,
    arity: i32,
    group: &'static str,
    since: &'static str,
    summary: &'static str,
    subs: &'static [Spec],
) -> Spec {
    Spec {
        name,
        arity,
        flags: &[],
        keys: NONE,
        group,
        since,
        summary,
        subs,
    }
}

/// Every command masse answers.
pub static COMMANDS: [Spec; 29] = [
    c("append", 3, WF, ONE, "string", "2.0.0", "Appends a string to the value of a key. Creates the key if it doesn't exist."),
    c("auth", -2, NOAUTH, NONE, "connection", "1.0.0", "Authenticates the connection."),
    container("client", -2, "connection", "2.4.0", "A container for client connection commands.", &CLIENT_SUBS),
    container("command", -1, "server", "2.8.13", "Returns detailed information about all commands.", &COMMAND_SUBS),
    container("config", -2, "server", "2.0.0", "A container for server configuration commands.", &CONFIG_SUBS),
    c("dbsize", 1, RF, NONE, "server", "1.0.0", "Returns the number of keys in the database."),
    c("decr", 2, WF, ONE, "string", "1.0.0", "Decrements the integer value of a key by one. Uses 0 as initial value if the key doesn't exist."),
    c("decrby", 3, WF, ONE, "string", "1.0.0", "Decrements a number from the integer value of a key. Uses 0 as initial value if the key doesn't exist."),
    c("del", -2, &["write"], ALL, "generic", "1.0.0", "Deletes one or more keys."),
    c("echo", 2, &["fast"], NONE, "connection", "1.0.0", "Returns the given string."),
    c("exists", -2, RF, ALL, "generic", "1.0.0", "Determines whether one or more keys exist."),
    c("get", 2, RF, ONE, "string", "1.0.0", "Returns the string value of a key."),
    c("getdel", 2, &["write", "fast"], ONE, "string", "6.2.0", "Returns the string value of a key after deleting the key."),
    c("hello", -1, NOAUTH, NONE, "connection", "6.0.0", "Handshakes with the Redis server."),
    c("incr", 2, WF, ONE, "string", "1.0.0", "Increments the integer value of a key by one. Uses 0 as initial value if the key doesn't exist."),
    c("incrby", 3, WF, ONE, "string", "1.0.0", "Increments the integer value of a key by a number. Uses 0 as initial value if the key doesn't exist."),
    c("info", -1, &["loading", "stale"], NONE, "server", "1.0.0", "Returns information and statistics about the server."),
    c("mget", -2, RF, ALL, "string", "1.0.0", "Atomically returns the string values of one or more keys."),
    c("mset", -3, W, PAIRS, "string", "1.0.1", "Atomically creates or modifies the string values of one or more keys."),
    c("msetnx", -3, W, PAIRS, "string", "1.0.1", "Atomically modifies the string values of one or more keys only when all keys don't exist."),
    c("ping", -1, &["fast"], NONE, "connection", "1.0.0", "Returns the server's liveliness response."),
    c("quit", -1, &["noscript", "loading", "stale", "fast", "no_auth"], NONE, "connection", "1.0.0", "Closes the connection."),
    c("scan", -2, &["readonly"], NONE, "generic", "2.8.0", "Iterates over the key names in the database."),
    c("select", 2, CONN, NONE, "connection", "1.0.0", "Changes the selected database (masse has only database 0)."),
    c("set", -3, W, ONE, "string", "1.0.0", "Sets the string value of a key, ignoring its type. The key is created if it doesn't exist."),
    c("setnx", 3, WF, ONE, "string", "1.0.0", "Set the string value of a key only when the key doesn't exist."),
    c("shutdown", -1, &["admin", "noscript", "loading", "stale", "no_multi", "allow_busy"], NONE, "server", "1.0.0", "Stops the server: finishes the writes in flight and closes the pool cleanly."),
    c("strlen", 2, RF, ONE, "string", "2.2.0", "Returns the length of a string value."),
    c("unlink", -2, &["write", "fast"], ALL, "generic", "4.0.0", "Asynchronously deletes one or more keys."),
];

/// The command named `name` (any case).
pub fn find(name: &[u8]) -> Option<&'static Spec> {
    let n = std::str::from_utf8(name).ok()?.to_ascii_lowercase();
    COMMANDS.iter().find(|s| s.name == n)
}

/// The subcommand `name` of `spec` (any case).
pub fn find_sub(spec: &'static Spec, name: &[u8]) -> Option<&'static Spec> {
    let n = std::str::from_utf8(name).ok()?.to_ascii_lowercase();
    spec.subs.iter().find(|s| s.name == n)
}

/// Whether `argc` arguments (the name included) fit `arity`.
pub fn arity_ok(arity: i32, argc: usize) -> bool {
    if arity >= 0 {
        argc == arity as usize
    } else {
        argc >= arity.unsigned_abs() as usize
    }
}
