use super::*;

/// The rule clients enforce: `^[A-Za-z0-9_-]{1,64}$`.
fn client_accepts(name: &str) -> bool {
    (1..=MAX_LEN).contains(&name.len()) && name.chars().all(is_allowed)
}

fn table(servers: &[(&str, &[&str])]) -> (NameTable, Vec<Collision>) {
    let mut builder = NameTable::builder(Separator::default());
    for (server, names) in servers {
        builder.server(*server, names.iter().copied());
    }
    builder.build()
}

fn exposed_names(table: &NameTable) -> Vec<&str> {
    table.iter().map(|(_, exposed)| exposed).collect()
}

fn original(server: usize, name: &str) -> Original {
    Original {
        server,
        name: name.to_owned(),
    }
}

#[test]
fn plain_names_are_prefixed_even_with_one_server() {
    let (table, collisions) = table(&[("filesystem", &["read_file", "list_directory"])]);
    assert_eq!(
        exposed_names(&table),
        ["filesystem__read_file", "filesystem__list_directory"]
    );
    assert!(collisions.is_empty());
    assert_eq!(
        table.resolve("filesystem__read_file"),
        Some(&original(0, "read_file"))
    );
    assert_eq!(
        table.exposed(0, "list_directory"),
        Some("filesystem__list_directory")
    );
    assert_eq!(table.server_name(0), Some("filesystem"));
    assert_eq!(table.resolve("read_file"), None);
    assert_eq!(table.exposed(1, "read_file"), None);
    assert_eq!(table.len(), 2);
}

#[test]
fn characters_clients_refuse_become_underscores() {
    let sep = Separator::default();
    assert_eq!(
        exposed_name(&sep, "my.server", "get.weather"),
        "my_server__get_weather"
    );
    assert_eq!(exposed_name(&sep, "café", "a b/c"), "caf___a_b_c");
    assert_eq!(exposed_name(&sep, "s", "get-sum"), "s__get-sum");
    assert_eq!(exposed_name(&sep, "", ""), "__");
    let dash = Separator::new("-").expect("valid separator");
    assert_eq!(exposed_name(&dash, "gh", "get_file"), "gh-get_file");
}

#[test]
fn long_names_are_shortened_with_a_stable_hash() {
    let sep = Separator::default();
    let long = "a".repeat(100);
    let name = exposed_name(&sep, "server", &long);
    assert_eq!(name.len(), MAX_LEN);
    assert!(client_accepts(&name));
    // First 55 characters, `_`, then the first 8 hex digits of
    // SHA-256("server\0" + 100 × "a") (checked with Python's hashlib),
    // fixed here so that a change of algorithm, which would rename tools
    // for every user, fails the test.
    assert_eq!(
        name,
        format!(
            "server__{}_{}",
            "a".repeat(47),
            hash_hex("server", &long, 0)
        )
    );
    assert_eq!(hash_hex("server", &long, 0), "43e8831c");
    // Names that differ only past the cut differ after it.
    let other = exposed_name(&sep, "server", &format!("{long}b"));
    assert_ne!(name, other);
    assert_eq!(name[..55], other[..55]);
    // Exactly 64 is not shortened.
    let exact = format!("s__{}", "x".repeat(61));
    assert_eq!(exposed_name(&sep, "s", &"x".repeat(61)), exact);
}

#[test]
fn separators_are_checked() {
    assert_eq!(Separator::default().as_str(), "__");
    assert_eq!(Separator::new(""), Err(NamingError::EmptySeparator));
    assert_eq!(
        Separator::new(".").map_err(|e| e.to_string()),
        Err("the name separator \".\" may only use the characters A-Z, a-z, 0-9, _ and -".into())
    );
    assert_eq!(
        Separator::new("_________"),
        Err(NamingError::SeparatorTooLong("_________".into()))
    );
    assert!(Separator::new("--").is_ok());
}

#[test]
fn a_collision_keeps_the_unchanged_name_and_suffixes_the_other() {
    // `get.weather` and `get_weather` both come out as `w__get_weather`.
    let (table, collisions) = table(&[("w", &["get.weather", "get_weather"])]);
    let suffixed = format!("w__get_weather_{}", hash_hex("w", "get.weather", 0));
    assert_eq!(exposed_names(&table), [suffixed.as_str(), "w__get_weather"]);
    assert_eq!(
        collisions,
        [Collision {
            exposed: "w__get_weather".into(),
            kept: original(0, "get_weather"),
            renamed: vec![(original(0, "get.weather"), suffixed.clone())],
        }]
    );
    assert_eq!(table.resolve(&suffixed), Some(&original(0, "get.weather")));
    assert_eq!(
        table.resolve("w__get_weather"),
        Some(&original(0, "get_weather"))
    );
}

#[test]
fn across_servers_the_first_in_config_order_keeps_the_name() {
    // `a` + `b__c` and `a__b` + `c` both join to `a__b__c`.
    let (table, collisions) = table(&[("a__b", &["c"]), ("a", &["b__c"])]);
    assert_eq!(table.resolve("a__b__c"), Some(&original(0, "c")));
    let renamed = table.exposed(1, "b__c").expect("named");
    assert!(renamed.starts_with("a__b__c_") && client_accepts(renamed));
    assert_eq!(collisions.len(), 1);
    assert_eq!(collisions[0].kept, original(0, "c"));
}

#[test]
fn collisions_settle_the_same_whatever_order_names_arrive_in() {
    let names = ["x.y", "x_y", "x-y", "x y", "x/y"];
    let mut reference: Option<Vec<(Original, String)>> = None;
    let mut rng = fastrand::Rng::with_seed(7);
    for _ in 0..20 {
        let mut shuffled = names;
        rng.shuffle(&mut shuffled);
        let (table, collisions) = table(&[("s", &shuffled)]);
        let mut all: Vec<(Original, String)> = table
            .iter()
            .map(|(original, exposed)| (original.clone(), exposed.to_owned()))
            .collect();
        all.sort();
        assert_eq!(collisions.len(), 1);
        assert_eq!(collisions[0].kept, original(0, "x_y"), "the unchanged one");
        assert_eq!(collisions[0].renamed.len(), 3, "x-y differs from x_y");
        match &reference {
            None => reference = Some(all),
            Some(expected) => assert_eq!(&all, expected),
        }
    }
}

#[test]
fn a_suffixed_name_never_takes_a_name_that_is_in_use() {
    // A tool whose real name is what the loser's suffix would be.
    let taken = format!("s__a_b_{}", hash_hex("s", "a.b", 0));
    let real = taken.trim_start_matches("s__").to_owned();
    let (table, collisions) = table(&[("s", &["a.b", "a_b", real.as_str()])]);
    assert_eq!(table.resolve(&taken), Some(&original(0, &real)));
    let renamed = table.exposed(0, "a.b").expect("named");
    assert_ne!(renamed, taken);
    assert_eq!(renamed, format!("s__a_b_{}", hash_hex("s", "a.b", 1)));
    assert_eq!(collisions.len(), 1);
    let distinct: HashSet<&str> = exposed_names(&table).into_iter().collect();
    assert_eq!(distinct.len(), 3);
}

#[test]
fn duplicate_names_from_one_server_count_once() {
    let (table, collisions) = table(&[("s", &["echo", "echo"])]);
    assert_eq!(exposed_names(&table), ["s__echo"]);
    assert!(collisions.is_empty());
}

/// Random names drawn from characters that make trouble: separators,
/// dots, spaces, non-ASCII, and long runs.
fn random_name(rng: &mut fastrand::Rng) -> String {
    const PIECES: &[&str] = &[
        "a", "b", "Z", "0", "_", "__", "-", ".", " ", "é", "/", "tool", "get", "x",
    ];
    let len = if rng.u8(..10) == 0 {
        rng.usize(40..90)
    } else {
        rng.usize(0..8)
    };
    (0..len)
        .map(|_| PIECES[rng.usize(..PIECES.len())])
        .collect()
}

fn random_servers(rng: &mut fastrand::Rng, count: usize) -> Vec<(String, Vec<String>)> {
    (0..count)
        .map(|_| {
            let server = random_name(rng);
            let names = (0..rng.usize(0..12)).map(|_| random_name(rng)).collect();
            (server, names)
        })
        .collect()
}

fn build(servers: &[(String, Vec<String>)]) -> (NameTable, Vec<Collision>) {
    let mut builder = NameTable::builder(Separator::default());
    for (server, names) in servers {
        builder.server(server.clone(), names.iter().cloned());
    }
    builder.build()
}

#[test]
fn property_every_name_is_valid_unique_and_round_trips() {
    for seed in 0..200 {
        let mut rng = fastrand::Rng::with_seed(seed);
        let count = rng.usize(1..6);
        let servers = random_servers(&mut rng, count);
        let (table, _) = build(&servers);
        let mut seen = HashSet::new();
        for (original, exposed) in table.iter() {
            assert!(client_accepts(exposed), "seed {seed}: {exposed:?}");
            assert!(seen.insert(exposed), "seed {seed}: {exposed:?} twice");
            assert_eq!(table.resolve(exposed), Some(original), "seed {seed}");
            assert_eq!(
                table.exposed(original.server, &original.name),
                Some(exposed),
                "seed {seed}"
            );
        }
        for (index, (_, names)) in servers.iter().enumerate() {
            for name in names {
                assert!(
                    table.exposed(index, name).is_some(),
                    "seed {seed}: {name:?}"
                );
            }
        }
    }
}

#[test]
fn property_the_same_input_gives_the_same_table() {
    for seed in 0..50 {
        let mut rng = fastrand::Rng::with_seed(seed);
        let servers = random_servers(&mut rng, 4);
        let (a, collisions_a) = build(&servers);
        let (b, collisions_b) = build(&servers);
        assert_eq!(a, b);
        assert_eq!(collisions_a, collisions_b);

        // Each server's list in another order: the same name for each
        // original.
        let mut reordered = servers.clone();
        for (_, names) in &mut reordered {
            rng.shuffle(names);
        }
        let (c, collisions_c) = build(&reordered);
        for (original, exposed) in a.iter() {
            assert_eq!(
                c.exposed(original.server, &original.name),
                Some(exposed),
                "seed {seed}"
            );
        }
        assert_eq!(collisions_a.len(), collisions_c.len());
    }
}

#[test]
fn property_adding_a_server_renames_only_what_it_collides_with() {
    for seed in 0..100 {
        let mut rng = fastrand::Rng::with_seed(seed);
        let servers = random_servers(&mut rng, 3);
        let (before, _) = build(&servers);
        let mut more = servers.clone();
        let position = rng.usize(..=more.len());
        more.insert(position, random_servers(&mut rng, 1).remove(0));
        let (after, collisions) = build(&more);
        // Originals named in a collision after the change may move; every
        // other name stays exactly as it was.
        let contested: HashSet<&str> = collisions.iter().map(|c| c.exposed.as_str()).collect();
        for (original, exposed) in before.iter() {
            let moved = if original.server >= position {
                original.server + 1
            } else {
                original.server
            };
            let now = after.exposed(moved, &original.name).expect("still there");
            let plain = exposed_name(
                &Separator::default(),
                &servers[original.server].0,
                &original.name,
            );
            if !contested.contains(plain.as_str()) {
                assert_eq!(now, exposed, "seed {seed}");
            }
        }
    }
}
