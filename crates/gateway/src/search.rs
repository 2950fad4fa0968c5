//! Ranking tools for a query, for the `--tool-search` mode.
//!
//! With dozens of servers the full tool list no longer fits a model's
//! context, so the gateway can offer a search tool instead. This module
//! ranks tools with BM25F over two fields: the exposed name (which carries
//! the server's name too) weighted above the description, each with its own
//! length normalisation.
//!
//! Tokens are the alphanumeric runs of a text, split again at camelCase and
//! snake_case boundaries (`longRunningOperation` is `long running
//! operation`), lowercased, without a few English stop words, and with a
//! plural `s` folded (`files` matches `file`). That is all the language
//! knowledge there is: it is meant for tool names, not prose.

#[cfg(test)]
mod tests;

use std::collections::HashMap;

/// Term-frequency saturation.
const K1: f64 = 1.2;
/// Weight of a match in the name: a tool is mostly what its name says.
const NAME_WEIGHT: f64 = 4.0;
/// Weight of a match in the description.
const DESCRIPTION_WEIGHT: f64 = 1.0;
/// Length normalisation of names: strong, so that of `list_directory` and
/// `list_allowed_directories` the query "list directory" prefers the one
/// that says nothing else.
const NAME_B: f64 = 0.8;
/// Length normalisation of descriptions: mild, since a long description is
/// usually a thorough one, not one about something else.
const DESCRIPTION_B: f64 = 0.3;

/// Words too common to say anything about a tool.
const STOP_WORDS: &[&str] = &[
    "a", "an", "and", "any", "are", "as", "at", "be", "by", "can", "for", "from", "how", "i", "in",
    "into", "is", "it", "its", "me", "my", "of", "on", "or", "some", "that", "the", "this", "to",
    "use", "with", "you", "your",
];

/// A searchable set of tools.
#[derive(Debug, Clone, Default)]
pub struct Index {
    docs: Vec<Doc>,
    /// Term -> how many documents contain it in either field.
    doc_freq: HashMap<String, usize>,
    avg_name_len: f64,
    avg_description_len: f64,
}

#[derive(Debug, Clone, Default)]
struct Doc {
    name: Field,
    description: Field,
}

/// One field of a document: its term counts and its length in tokens.
#[derive(Debug, Clone, Default)]
struct Field {
    counts: HashMap<String, u32>,
    len: usize,
}

/// Splits `text` into lowercase search tokens (see the module docs).
pub fn tokenize(text: &str) -> Vec<String> {
    let mut tokens = Vec::new();
    for run in text.split(|c: char| !c.is_alphanumeric()) {
        for word in split_case(run) {
            let word = word.to_lowercase();
            if !STOP_WORDS.contains(&word.as_str()) {
                tokens.push(fold_plural(word));
            }
        }
    }
    tokens
}

/// Splits an alphanumeric run at case changes: `getTinyImage` at `T` and
/// `I`, `HTTPServer` before `Server`.
fn split_case(run: &str) -> Vec<&str> {
    let chars: Vec<(usize, char)> = run.char_indices().collect();
    let mut words = Vec::new();
    let mut start = 0;
    for i in 1..chars.len() {
        let (at, c) = chars[i];
        let prev = chars[i - 1].1;
        let next_lower = chars.get(i + 1).is_some_and(|(_, n)| n.is_lowercase());
        let boundary = c.is_uppercase()
            && (prev.is_lowercase()
                || prev.is_ascii_digit()
                || (prev.is_uppercase() && next_lower));
        if boundary {
            words.push(&run[start..at]);
            start = at;
        }
    }
    if start < run.len() {
        words.push(&run[start..]);
    }
    words
}

/// `files` -> `file`, `directories` -> `directory`, `processes` ->
/// `process`, `matches` -> `match`; leaves `status`, `this` and short
/// words alone.
fn fold_plural(word: String) -> String {
    let strip = |n: usize| word[..word.len() - n].to_owned();
    if word.len() <= 3 {
        word
    } else if word.len() > 4 && word.ends_with("ies") {
        format!("{}y", strip(3))
    } else if ["sses", "xes", "ches", "shes"]
        .iter()
        .any(|end| word.ends_with(end))
    {
        strip(2)
    } else if word.ends_with('s') && !["ss", "us", "is"].iter().any(|end| word.ends_with(end)) {
        strip(1)
    } else {
        word
    }
}

// === impl Index ===

impl Index {
    /// Indexes `docs`, each an exposed tool name and its description (empty
    /// if it has none). Search results refer to positions in `docs`.
    pub fn new<N: AsRef<str>, D: AsRef<str>>(docs: &[(N, D)]) -> Index {
        let docs: Vec<Doc> = docs
            .iter()
            .map(|(name, description)| Doc {
                name: Field::new(name.as_ref()),
                description: Field::new(description.as_ref()),
            })
            .collect();
        let mut doc_freq: HashMap<String, usize> = HashMap::new();
        for doc in &docs {
            let mut terms: Vec<&String> = doc
                .name
                .counts
                .keys()
                .chain(doc.description.counts.keys())
                .collect();
            terms.sort_unstable();
            terms.dedup();
            for term in terms {
                *doc_freq.entry(term.clone()).or_default() += 1;
            }
        }
        let average = |len: fn(&Doc) -> usize| {
            if docs.is_empty() {
                1.0
            } else {
                (docs.iter().map(len).sum::<usize>() as f64 / docs.len() as f64).max(1.0)
            }
        };
        Index {
            avg_name_len: average(|doc| doc.name.len),
            avg_description_len: average(|doc| doc.description.len),
            docs,
            doc_freq,
        }
    }

    /// The best `limit` matches for `query`, best first, as `(position in
    /// the indexed docs, score)`. Documents that match no query term are
    /// left out; equal scores keep the indexed order.
    pub fn search(&self, query: &str, limit: usize) -> Vec<(usize, f64)> {
        let mut terms = tokenize(query);
        terms.sort_unstable();
        terms.dedup();
        let n = self.docs.len() as f64;
        let weighted: Vec<(&str, f64)> = terms
            .iter()
            .filter_map(|term| {
                let df = *self.doc_freq.get(term)? as f64;
                let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
                Some((term.as_str(), idf))
            })
            .collect();
        let mut scored: Vec<(usize, f64)> = self
            .docs
            .iter()
            .enumerate()
            .filter_map(|(i, doc)| {
                let score: f64 = weighted
                    .iter()
                    .map(|&(term, idf)| {
                        let tf = NAME_WEIGHT * doc.name.normalized(term, NAME_B, self.avg_name_len)
                            + DESCRIPTION_WEIGHT
                                * doc.description.normalized(
                                    term,
                                    DESCRIPTION_B,
                                    self.avg_description_len,
                                );
                        idf * tf * (K1 + 1.0) / (K1 + tf)
                    })
                    .sum();
                (score > 0.0).then_some((i, score))
            })
            .collect();
        scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        scored.truncate(limit);
        scored
    }

    /// How many documents are indexed.
    pub fn len(&self) -> usize {
        self.docs.len()
    }

    /// Whether nothing is indexed.
    pub fn is_empty(&self) -> bool {
        self.docs.is_empty()
    }
}

// === impl Field ===

impl Field {
    fn new(text: &str) -> Field {
        let tokens = tokenize(text);
        let mut counts: HashMap<String, u32> = HashMap::new();
        for token in &tokens {
            *counts.entry(token.clone()).or_default() += 1;
        }
        Field {
            counts,
            len: tokens.len(),
        }
    }

    /// The term's count, normalised for this field's length.
    fn normalized(&self, term: &str, b: f64, avg_len: f64) -> f64 {
        let Some(&count) = self.counts.get(term) else {
            return 0.0;
        };
        f64::from(count) / (1.0 - b + b * self.len as f64 / avg_len)
    }
}
