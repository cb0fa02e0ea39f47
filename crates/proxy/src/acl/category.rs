//! Redis's ACL categories, as bits: a command's categories come from the
//! cluster's `COMMAND` reply (its `acl` field), a rule's `+@name` names one.

/// Every category Redis 7 knows, in `ACL CAT` order; bit `i` is `NAMES[i]`.
pub const NAMES: [&str; 21] = [
    "keyspace",
    "read",
    "write",
    "set",
    "sortedset",
    "list",
    "hash",
    "string",
    "bitmap",
    "hyperloglog",
    "geo",
    "stream",
    "pubsub",
    "admin",
    "fast",
    "slow",
    "blocking",
    "dangerous",
    "connection",
    "transaction",
    "scripting",
];

/// Every category at once (`@all`).
pub const ALL: u32 = (1 << NAMES.len()) - 1;

/// The bit of a category name (`read` or `@read`, any case); `all` is
/// every bit.
pub fn bits(name: &str) -> Option<u32> {
    let name = name.strip_prefix('@').unwrap_or(name);
    if name.eq_ignore_ascii_case("all") {
        return Some(ALL);
    }
    NAMES
        .iter()
        .position(|n| n.eq_ignore_ascii_case(name))
        .map(|i| 1 << i)
}

/// The bits of the category names a `COMMAND` reply gives (`@read`,
/// `@fast`, ...); unknown names are left out.
pub fn from_names<'a>(names: impl IntoIterator<Item = &'a str>) -> u32 {
    names
        .into_iter()
        .filter_map(bits)
        .filter(|&b| b != ALL)
        .fold(0, |acc, b| acc | b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_bits() {
        assert_eq!(bits("@read"), Some(1 << 1));
        assert_eq!(bits("DANGEROUS"), Some(1 << 17));
        assert_eq!(bits("all"), Some(ALL));
        assert_eq!(bits("nope"), None);
        assert_eq!(
            from_names(["@write", "@slow", "@odd"]),
            (1 << 2) | (1 << 15)
        );
    }
}
