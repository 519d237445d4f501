//! Label selectors from requests: the Kubernetes text syntax (`app=web,env in (ci),!legacy`)
//! and the structured form, both checked against the label syntax rules.

use super::types::{SelectorInput, SelectorObject, SelectorRequirement};

/// Parses and validates a selector; the error names the rule that was broken.
pub fn parse(input: &SelectorInput) -> Result<SelectorObject, String> {
    let sel = match input {
        SelectorInput::Text(text) => parse_text(text)?,
        SelectorInput::Object(obj) => obj.clone(),
    };
    validate(&sel)?;
    Ok(sel)
}

/// A selector in the text syntax of `kubectl -l` ([`parse_text`]'s inverse); empty for the
/// selector that selects every pod.
pub fn text(sel: &SelectorObject) -> String {
    let mut parts: Vec<String> = sel
        .match_labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    for r in &sel.match_expressions {
        parts.push(match r.operator.as_str() {
            "Exists" => r.key.clone(),
            "DoesNotExist" => format!("!{}", r.key),
            "In" => format!("{} in ({})", r.key, r.values.join(",")),
            _ => format!("{} notin ({})", r.key, r.values.join(",")),
        });
    }
    parts.join(",")
}

/// Parses the text syntax of `kubectl -l`.
pub fn parse_text(text: &str) -> Result<SelectorObject, String> {
    let mut sel = SelectorObject::default();
    for term in split_terms(text)? {
        let term = term.trim();
        if term.is_empty() {
            if text.trim().is_empty() {
                continue;
            }
            return Err(format!("selector {text:?} has an empty requirement"));
        }
        if let Some(key) = term.strip_prefix('!') {
            sel.match_expressions
                .push(req(key.trim(), "DoesNotExist", vec![]));
        } else if let Some((key, rest)) = split_word(term, " notin ") {
            sel.match_expressions
                .push(req(key, "NotIn", set_values(rest, text)?));
        } else if let Some((key, rest)) = split_word(term, " in ") {
            sel.match_expressions
                .push(req(key, "In", set_values(rest, text)?));
        } else if let Some((key, value)) = term.split_once("!=") {
            sel.match_expressions
                .push(req(key.trim(), "NotIn", vec![value.trim().to_string()]));
        } else if let Some((key, value)) = term.split_once("==").or_else(|| term.split_once('=')) {
            let (key, value) = (key.trim().to_string(), value.trim().to_string());
            if sel.match_labels.insert(key.clone(), value).is_some() {
                return Err(format!("selector {text:?} names label {key:?} twice"));
            }
        } else if term.contains(['(', ')', '<', '>', ' ']) {
            return Err(format!("selector {text:?}: cannot parse {term:?}"));
        } else {
            sel.match_expressions.push(req(term, "Exists", vec![]));
        }
    }
    Ok(sel)
}

fn req(key: &str, op: &str, values: Vec<String>) -> SelectorRequirement {
    SelectorRequirement {
        key: key.trim().to_string(),
        operator: op.to_string(),
        values,
    }
}

/// Splits at commas that are not inside parentheses.
fn split_terms(text: &str) -> Result<Vec<&str>, String> {
    let (mut depth, mut start, mut terms) = (0i32, 0usize, vec![]);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                terms.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        if !(0..=1).contains(&depth) {
            return Err(format!("selector {text:?} has unbalanced parentheses"));
        }
    }
    if depth != 0 {
        return Err(format!("selector {text:?} has unbalanced parentheses"));
    }
    terms.push(&text[start..]);
    Ok(terms)
}

fn split_word<'a>(term: &'a str, word: &str) -> Option<(&'a str, &'a str)> {
    let normalized = term.find(word)?;
    Some((
        term[..normalized].trim(),
        term[normalized + word.len()..].trim(),
    ))
}

fn set_values(rest: &str, text: &str) -> Result<Vec<String>, String> {
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| format!("selector {text:?}: a set must be written (a,b)"))?;
    let values: Vec<String> = inner.split(',').map(|v| v.trim().to_string()).collect();
    if values.iter().all(String::is_empty) {
        return Err(format!("selector {text:?}: a set needs at least one value"));
    }
    Ok(values)
}

/// Checks keys, values and operators against the Kubernetes label rules.
pub fn validate(sel: &SelectorObject) -> Result<(), String> {
    for (key, value) in &sel.match_labels {
        check_key(key)?;
        check_value(key, value)?;
    }
    for r in &sel.match_expressions {
        check_key(&r.key)?;
        match r.operator.as_str() {
            "In" | "NotIn" => {
                if r.values.is_empty() {
                    return Err(format!(
                        "selector: {} {} needs at least one value",
                        r.key, r.operator
                    ));
                }
                for v in &r.values {
                    check_value(&r.key, v)?;
                }
            }
            "Exists" | "DoesNotExist" => {
                if !r.values.is_empty() {
                    return Err(format!(
                        "selector: {} {} takes no values",
                        r.key, r.operator
                    ));
                }
            }
            other => {
                return Err(format!(
                    "selector: operator {other:?} of {} must be In, NotIn, Exists or DoesNotExist",
                    r.key
                ));
            }
        }
    }
    Ok(())
}

fn is_name(s: &str, max: usize) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= max
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// Whether `s` is a DNS-1123 subdomain (object names, label-key prefixes).
pub fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|part| {
            let b = part.as_bytes();
            !b.is_empty()
                && b[0].is_ascii_alphanumeric()
                && b[b.len() - 1].is_ascii_alphanumeric()
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        })
}

fn check_key(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if prefix.is_some_and(|p| !is_dns_subdomain(p)) || !is_name(name, 63) {
        return Err(format!(
            "selector: {key:?} is not a valid label key (optional DNS prefix/, then up to 63 \
             of [A-Za-z0-9-_.], starting and ending alphanumeric)"
        ));
    }
    Ok(())
}

fn check_value(key: &str, value: &str) -> Result<(), String> {
    if !value.is_empty() && !is_name(value, 63) {
        return Err(format!(
            "selector: value {value:?} of {key:?} is not a valid label value (up to 63 of \
             [A-Za-z0-9-_.], starting and ending alphanumeric)"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(s: &str) -> Result<SelectorObject, String> {
        parse(&SelectorInput::Text(s.into()))
    }

    #[test]
    fn equality_and_set_based_terms_parse() {
        let sel = text("app=web, tier==backend,env in (ci, dev),zone notin (a),!legacy,track,x!=y")
            .unwrap();
        assert_eq!(sel.match_labels.get("app").map(String::as_str), Some("web"));
        assert_eq!(
            sel.match_labels.get("tier").map(String::as_str),
            Some("backend")
        );
        let ops: Vec<(&str, &str)> = sel
            .match_expressions
            .iter()
            .map(|r| (r.key.as_str(), r.operator.as_str()))
            .collect();
        assert_eq!(
            ops,
            [
                ("env", "In"),
                ("zone", "NotIn"),
                ("legacy", "DoesNotExist"),
                ("track", "Exists"),
                ("x", "NotIn")
            ]
        );
        assert_eq!(sel.match_expressions[0].values, ["ci", "dev"]);
    }

    #[test]
    fn an_empty_selector_selects_everything() {
        assert_eq!(text("").unwrap(), SelectorObject::default());
    }

    #[test]
    fn malformed_selectors_are_refused() {
        for bad in [
            "app=",
            "=web",
            "app in web",
            "app in ()",
            "app in (a",
            "a b",
            "app=web,,x=y",
            "app=w eb",
            "-app=web",
            "app=web,app=api",
            "Bad_Prefix/x=y",
        ] {
            let sel = text(bad);
            if bad == "app=" {
                // An empty value is valid Kubernetes syntax.
                assert!(sel.is_ok(), "{bad:?}: {sel:?}");
                continue;
            }
            assert!(sel.is_err(), "{bad:?} was accepted: {sel:?}");
        }
    }

    #[test]
    fn a_structured_selector_with_an_unknown_operator_is_refused() {
        let sel = SelectorObject {
            match_expressions: vec![req("app", "Like", vec!["web".into()])],
            ..Default::default()
        };
        let err = parse(&SelectorInput::Object(sel)).unwrap_err();
        assert!(
            err.contains("must be In, NotIn, Exists or DoesNotExist"),
            "{err}"
        );
    }
}
