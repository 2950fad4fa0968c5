use super::*;

/// The tools of `@modelcontextprotocol/server-everything` (2026 names) and
/// `@modelcontextprotocol/server-filesystem`, as a gateway would expose
/// them, with descriptions close to theirs.
const TOOLS: &[(&str, &str)] = &[
    ("everything__echo", "Echoes back the input string"),
    ("everything__get-sum", "Returns the sum of two numbers"),
    (
        "everything__trigger-long-running-operation",
        "Demonstrates a long running operation with progress updates.",
    ),
    (
        "everything__get-env",
        "Returns all environment variables, helpful for debugging MCP server configuration",
    ),
    (
        "everything__trigger-sampling-request",
        "Trigger a Request from the Server for LLM Sampling",
    ),
    (
        "everything__get-tiny-image",
        "Returns a tiny MCP logo image.",
    ),
    (
        "everything__get-annotated-message",
        "Demonstrates how annotations can be used to provide metadata about content.",
    ),
    (
        "everything__get-resource-reference",
        "Returns a resource reference that can be used by MCP clients",
    ),
    (
        "everything__get-resource-links",
        "Returns up to ten resource links that reference different types of resources",
    ),
    (
        "everything__get-structured-content",
        "Returns structured content along with an output schema for client data validation",
    ),
    (
        "everything__trigger-elicitation-request",
        "Trigger a Request from the Server for User Elicitation",
    ),
    (
        "everything__toggle-simulated-logging",
        "Toggles simulated, random-leveled logging on or off.",
    ),
    (
        "everything__gzip-file-as-resource",
        "Compresses a single file using gzip compression and returns it as a resource",
    ),
    (
        "filesystem__read_file",
        "Read the complete contents of a file as text. DEPRECATED: Use read_text_file instead.",
    ),
    (
        "filesystem__read_text_file",
        "Read the complete contents of a file from the file system as text. Handles various text \
         encodings. Use the 'head' parameter to read only the first N lines, or 'tail' for the \
         last N lines. Only works within allowed directories.",
    ),
    (
        "filesystem__read_media_file",
        "Read an image or audio file. Returns the base64 encoded data and MIME type.",
    ),
    (
        "filesystem__read_multiple_files",
        "Read the contents of multiple files simultaneously, more efficient than reading files \
         one by one. Failed reads for individual files do not stop the entire operation.",
    ),
    (
        "filesystem__write_file",
        "Create a new file or completely overwrite an existing file with new content. Use with \
         caution: existing files are overwritten without warning.",
    ),
    (
        "filesystem__edit_file",
        "Make line-based edits to a text file. Each edit replaces exact line sequences with new \
         content. Returns a git-style diff showing the changes made.",
    ),
    (
        "filesystem__create_directory",
        "Create a new directory or ensure a directory exists. Can create multiple nested \
         directories in one operation; succeeds silently if it already exists.",
    ),
    (
        "filesystem__list_directory",
        "Get a detailed listing of all files and directories in a specified path. Results \
         distinguish files and directories with [FILE] and [DIR] prefixes.",
    ),
    (
        "filesystem__list_directory_with_sizes",
        "Get a detailed listing of all files and directories in a specified path, including \
         sizes. Results distinguish files and directories with [FILE] and [DIR] prefixes.",
    ),
    (
        "filesystem__directory_tree",
        "Get a recursive tree view of files and directories as a JSON structure, with a \
         children array for each directory.",
    ),
    (
        "filesystem__move_file",
        "Move or rename files and directories. Can move files between directories and rename \
         them in a single operation. Fails if the destination exists.",
    ),
    (
        "filesystem__search_files",
        "Recursively search for files and directories matching a glob pattern such as \
         '**/*.ext'. Returns full paths to all matching items.",
    ),
    (
        "filesystem__get_file_info",
        "Retrieve detailed metadata about a file or directory: size, creation time, last \
         modified time, permissions and type.",
    ),
    (
        "filesystem__list_allowed_directories",
        "Returns the list of directories that this server is allowed to access.",
    ),
];

fn index() -> Index {
    Index::new(TOOLS)
}

/// The names of the top `limit` results.
fn top(query: &str, limit: usize) -> Vec<&'static str> {
    index()
        .search(query, limit)
        .into_iter()
        .map(|(i, _)| TOOLS[i].0)
        .collect()
}

#[test]
fn tokens_split_at_case_and_punctuation() {
    assert_eq!(
        tokenize("longRunningOperation"),
        ["long", "running", "operation"]
    );
    assert_eq!(tokenize("getTinyImage"), ["get", "tiny", "image"]);
    assert_eq!(
        tokenize("filesystem__list_directory_with_sizes"),
        ["filesystem", "list", "directory", "size"]
    );
    assert_eq!(
        tokenize("trigger-long-running-operation"),
        ["trigger", "long", "running", "operation"]
    );
    assert_eq!(
        tokenize("HTTPServer v2Api"),
        ["http", "server", "v2", "api"]
    );
    assert_eq!(tokenize("sampleLLM"), ["sample", "llm"]);
    assert_eq!(
        tokenize("Read the contents of files, directories & processes"),
        ["read", "content", "file", "directory", "process"]
    );
    assert_eq!(
        tokenize("matches boxes sizes bus gas"),
        ["match", "box", "size", "bus", "gas"]
    );
    assert_eq!(
        tokenize("the status of this process"),
        ["status", "process"]
    );
    assert_eq!(tokenize("Café_Übersicht"), ["café", "übersicht"]);
    assert!(tokenize(" -- ").is_empty());
}

#[test]
fn realistic_queries_find_the_right_tool_first() {
    let cases = [
        ("write a file", "filesystem__write_file"),
        ("add two numbers", "everything__get-sum"),
        ("sum", "everything__get-sum"),
        ("list directory contents", "filesystem__list_directory"),
        ("echo message", "everything__echo"),
        ("move rename file", "filesystem__move_file"),
        ("rename a file", "filesystem__move_file"),
        ("environment variables", "everything__get-env"),
        (
            "long running operation with progress",
            "everything__trigger-long-running-operation",
        ),
        (
            "longRunningOperation",
            "everything__trigger-long-running-operation",
        ),
        (
            "ask the LLM for sampling",
            "everything__trigger-sampling-request",
        ),
        ("image", "everything__get-tiny-image"),
        (
            "read multiple files at once",
            "filesystem__read_multiple_files",
        ),
        (
            "find files matching a glob pattern",
            "filesystem__search_files",
        ),
        ("file metadata permissions", "filesystem__get_file_info"),
        (
            "which directories are allowed",
            "filesystem__list_allowed_directories",
        ),
        ("create a new directory", "filesystem__create_directory"),
        ("tree of directories", "filesystem__directory_tree"),
        ("edit lines in a text file", "filesystem__edit_file"),
        ("compress gzip", "everything__gzip-file-as-resource"),
    ];
    for (query, expected) in cases {
        let found = top(query, 3);
        assert_eq!(found.first(), Some(&expected), "{query:?} gave {found:?}");
    }
}

#[test]
fn list_directory_outranks_its_longer_relatives() {
    let found = top("list directory", 4);
    assert_eq!(found.first(), Some(&"filesystem__list_directory"));
    assert!(found.contains(&"filesystem__list_directory_with_sizes"));
    assert!(found.contains(&"filesystem__list_allowed_directories"));
}

#[test]
fn limit_order_and_non_matches() {
    let index = index();
    let results = index.search("file", 5);
    assert_eq!(results.len(), 5);
    assert!(
        results.windows(2).all(|pair| pair[0].1 >= pair[1].1),
        "{results:?}"
    );
    assert!(index.search("file", 0).is_empty());
    assert!(index.search("", 10).is_empty());
    assert!(index.search("the of and", 10).is_empty(), "stop words only");
    assert!(
        index.search("kubernetes", 10).is_empty(),
        "no match, no result"
    );
    // Every result matches at least one term.
    let everything = index.search("filesystem", 100);
    assert_eq!(everything.len(), 14);
    assert_eq!(index.len(), TOOLS.len());
}

#[test]
fn ties_keep_the_indexed_order_and_results_are_stable() {
    let index = Index::new(&[("a__x", ""), ("b__x", ""), ("c__x", "")]);
    let results = index.search("x", 10);
    let order: Vec<usize> = results.iter().map(|(i, _)| *i).collect();
    assert_eq!(order, [0, 1, 2]);
    assert_eq!(index.search("x", 10), results);
}

#[test]
fn the_name_counts_more_than_the_description() {
    let index = Index::new(&[
        ("s__notes", "Stores an image of the notes"),
        ("s__image", "Stores the notes"),
    ]);
    let results = index.search("image", 2);
    assert_eq!(results.first().map(|(i, _)| *i), Some(1));
}

#[test]
fn an_empty_index_finds_nothing() {
    let index = Index::new::<&str, &str>(&[]);
    assert!(index.is_empty());
    assert!(index.search("anything", 10).is_empty());
}
