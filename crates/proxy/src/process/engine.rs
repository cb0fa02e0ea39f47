//! The engine the nodes run, Redis or Valkey, as they say in `INFO server`
//! and `HELLO`: what orthrus answers in its own HELLO and INFO, and the
//! texts of the errors orthrus gives itself where the engines differ.

use orthrus_resp::Value;

/// What the nodes run.
#[derive(Clone, Debug, PartialEq)]
pub struct Engine {
    /// `redis` or `valkey` (INFO's `server_name`; Redis has none).
    pub name: String,
    /// INFO's `redis_version` (Valkey gives 7.2.4 there, for clients that
    /// look at it).
    pub redis_version: String,
    /// The engine's own version: `valkey_version`, else `redis_version`.
    pub version: String,
    /// HELLO's `modules`, as a node gives it (Valkey lists its Lua engine).
    pub modules: Option<Value>,
}

impl Default for Engine {
    /// Until a node has answered.
    fn default() -> Engine {
        Engine {
            name: "redis".to_owned(),
            redis_version: "7.0.0".to_owned(),
            version: "7.0.0".to_owned(),
            modules: None,
        }
    }
}

impl Engine {
    /// From a node's `INFO server` text and its `HELLO` reply.
    pub fn from_node(info: &str, hello: Option<&Value>) -> Engine {
        let field = |name: &str| {
            info.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .map(|v| v.trim().to_owned())
        };
        let default = Engine::default();
        let redis_version = field("redis_version").unwrap_or(default.redis_version);
        let name = field("server_name").unwrap_or(default.name);
        let version = field(&format!("{name}_version")).unwrap_or_else(|| redis_version.clone());
        Engine {
            name,
            redis_version,
            version,
            modules: hello.and_then(|h| h.field("modules")).map(as_maps),
        }
    }

    pub fn is_valkey(&self) -> bool {
        self.name == "valkey"
    }

    /// The error for `command` refused inside MULTI, in the engine's words
    /// (`redis`: Redis 7.0's text for it).
    pub fn not_in_multi(&self, command: &str, redis: &str) -> String {
        if self.is_valkey() {
            format!("ERR Command '{command}' not allowed inside a transaction")
        } else {
            redis.to_owned()
        }
    }
}

/// HELLO's modules with each module a map, as a RESP2 reply gives them in
/// flat arrays: written back for each client's protocol.
fn as_maps(modules: &Value) -> Value {
    let map = |module: &Value| match module.to_pairs() {
        Some(pairs) => Value::Map(
            pairs
                .into_iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        ),
        None => module.clone(),
    };
    match modules {
        Value::Array(items) => Value::Array(items.iter().map(map).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valkey_and_redis_say_who_they_are() {
        let valkey = Engine::from_node(
            "# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:9.1.2\r\n",
            None,
        );
        assert_eq!(
            (valkey.name.as_str(), valkey.version.as_str()),
            ("valkey", "9.1.2")
        );
        assert_eq!(valkey.redis_version, "7.2.4");
        assert_eq!(
            valkey.not_in_multi("multi", "ERR MULTI calls can not be nested"),
            "ERR Command 'multi' not allowed inside a transaction"
        );
        let redis = Engine::from_node("# Server\r\nredis_version:7.0.15\r\n", None);
        assert_eq!(
            (redis.name.as_str(), redis.version.as_str()),
            ("redis", "7.0.15")
        );
        assert_eq!(
            redis.not_in_multi("multi", "ERR MULTI calls can not be nested"),
            "ERR MULTI calls can not be nested"
        );
    }
}
