use super::super::statements::MAX_STATEMENT;

#[test]
fn passwords_never_reach_the_audit() {
    let mut wrong = Vec::new();
    for (statement, audited) in [
        (
            "ALTER ROLE ada PASSWORD 'it''s secret'",
            "ALTER ROLE ada PASSWORD '…'",
        ),
        (
            "create user bob with password E'a\\'b' login",
            "create user bob with password E'…' login",
        ),
        (
            "ALTER USER c PASSWORD 'SCRAM-SHA-256$4096:abc=$def=:ghi=';",
            "ALTER USER c PASSWORD '…';",
        ),
        (
            "ALTER ROLE d PASSWORD 'unterminated",
            "ALTER ROLE d PASSWORD '…'",
        ),
        ("ALTER ROLE e PASSWORD NULL", "ALTER ROLE e PASSWORD NULL"),
        (
            "SELECT id FROM users WHERE password='hunter2'",
            "SELECT id FROM users WHERE password='…'",
        ),
        (
            "SELECT password_hash FROM users WHERE password_set",
            "SELECT password_hash FROM users WHERE password_set",
        ),
        (
            "ALTER ROLE f PASSWORD 'x'; ALTER ROLE g PASSWORD 'y'",
            "ALTER ROLE f PASSWORD '…'; ALTER ROLE g PASSWORD '…'",
        ),
        // Dollar-quoted, with or without a tag, and Unicode-escaped literals.
        (
            "CREATE ROLE x PASSWORD $$top'secret$$;",
            "CREATE ROLE x PASSWORD '…';",
        ),
        (
            "ALTER ROLE y PASSWORD $pw$a$$b$pw$ LOGIN",
            "ALTER ROLE y PASSWORD '…' LOGIN",
        ),
        ("ALTER ROLE z PASSWORD $$open", "ALTER ROLE z PASSWORD '…'"),
        (
            "ALTER ROLE u PASSWORD U&'d\\0061ta'",
            "ALTER ROLE u PASSWORD U&'…'",
        ),
        // Names and literals spelled with escapes are read as PostgreSQL reads them.
        (
            "UPDATE users SET U&\"p\\0061ssword\" = 'hunter2'",
            "UPDATE users SET U&\"p\\0061ssword\" = '…'",
        ),
        (
            "SELECT dblink_connect(E'host=x p\\x61ssword=secret')",
            "SELECT dblink_connect(E…",
        ),
        (
            "SELECT connect(U&'host=x p\\0061ssword=secret')",
            "SELECT connect(…",
        ),
        (
            "UPDATE u SET U&\"p!0061ssword\" UESCAPE '!' = 'x'",
            "UPDATE u SET …",
        ),
        (
            "SELECT dblink_connect(E'host=x \\560assword=s3cret')",
            "SELECT dblink_connect(E…",
        ),
        (
            "SELECT dblink_connect('host=x pass'\n'word=s3cret')",
            "SELECT dblink_connect(…",
        ),
        (
            "SELECT dblink_connect('host=x pass' -- c\n'word=s3cret')",
            "SELECT dblink_connect(…",
        ),
        (
            "SELECT dblink_connect('host=x pass'\n-- c\n'word=s3cret')",
            "SELECT dblink_connect(…",
        ),
        // A parameter is no literal.
        ("ALTER ROLE p PASSWORD $1", "ALTER ROLE p PASSWORD $1"),
        // A backslash in a plain literal may be an escape (standard_conforming_strings off):
        // where it might be, everything after the first password is cut.
        (
            "ALTER ROLE a PASSWORD 'x\\'; ALTER ROLE b PASSWORD 'secret';",
            "ALTER ROLE a PASSWORD…",
        ),
        (
            "SELECT 'a\\' ; ALTER ROLE b PASSWORD 'x\\' hunter2'",
            "SELECT …",
        ),
        // Forms this reading cannot mask: cut after the first password.
        (
            "CREATE SUBSCRIPTION s CONNECTION 'host=h password=pw' PUBLICATION p",
            "CREATE SUBSCRIPTION s CONNECTION …",
        ),
        ("SELECT set_password('pw')", "SELECT set_password…"),
        ("CALL change_password('ada', 'pw')", "CALL change_password…"),
        (
            "SELECT 1 FROM t WHERE password IN ('pw')",
            "SELECT … FROM t WHERE password…",
        ),
        (
            "SELECT 1 FROM t WHERE password::text = 'pw'",
            "SELECT … FROM t WHERE password…",
        ),
        (
            "INSERT INTO t (name, password) VALUES ('a', 'pw')",
            "INSERT INTO t (name, password…",
        ),
        // A value reached by other words than `= '…'`: a setting's `TO`, a call, a typed
        // literal, a cast, other comparisons, a concatenation.
        ("SET app.password TO 'pw'", "SET app.password…"),
        (
            "SELECT 1 FROM u WHERE password = crypt('pw', 'x')",
            "SELECT … FROM u WHERE password…",
        ),
        (
            "SELECT 1 FROM u WHERE password = text 'pw'",
            "SELECT … FROM u WHERE password…",
        ),
        (
            "SELECT 1 FROM u WHERE password = CAST('pw' AS text)",
            "SELECT … FROM u WHERE password…",
        ),
        (
            "SELECT 1 FROM u WHERE password IS NOT DISTINCT FROM 'pw'",
            "SELECT … FROM u WHERE password…",
        ),
        (
            "SELECT 1 FROM u WHERE password = ANY('{pw}')",
            "SELECT … FROM u WHERE password…",
        ),
        (
            "SELECT 1 FROM u WHERE password COLLATE \"C\" = 'pw'",
            "SELECT … FROM u WHERE password…",
        ),
        (
            "SELECT 1 FROM u WHERE password BETWEEN 'a' AND 'pw'",
            "SELECT … FROM u WHERE password…",
        ),
        (
            "SELECT 1 FROM u WHERE password = 'p' || 'w'",
            "SELECT … FROM u WHERE password…",
        ),
        (
            "UPDATE u SET password = 'p'::text || 'w'",
            "UPDATE u SET password…",
        ),
        (
            "UPDATE u SET password = $1 || 'w'",
            "UPDATE u SET password…",
        ),
        // A literal right before the name, compared or named by it.
        (
            "SELECT 1 FROM u WHERE 'pw' = password",
            "SELECT … FROM u WHERE '…' = password",
        ),
        (
            "INSERT INTO u SELECT 'bob', 'pw' AS password",
            "INSERT INTO u SELECT '…', '…' AS password",
        ),
        // A literal before the name, in a statement read no further than the name.
        (
            "select 1 from users where 'hunter2' = password and id = 1",
            "select … from users where …",
        ),
        (
            "select 1 from users where 'hunter26' = user_password or true",
            "select … from users where …",
        ),
        ("select $$hunter24$$ = password", "select '…' = password"),
        // Every literal of the statement before the name, however it meets it.
        (
            "SELECT id FROM users u WHERE 'hunter2' = u.password",
            "SELECT id FROM users u WHERE '…' = u.password",
        ),
        (
            "SELECT id FROM users WHERE md5('hunter2') = password",
            "SELECT id FROM users WHERE md5('…') = password",
        ),
        (
            "SELECT crypt('hunter2', salt) = password FROM users WHERE id = 1",
            "SELECT crypt('…', salt) = password FROM users WHERE id = …",
        ),
        (
            "SELECT 1 WHERE ('a') = password; SELECT 'b'::text /* c */ LIKE password;",
            "SELECT … WHERE ('…') = password; SELECT '…'::text /* c */ LIKE password;",
        ),
        (
            "SELECT 'hunt' || 'er2' = password",
            "SELECT '…' || '…' = password",
        ),
        (
            "SELECT id FROM users WHERE substring(password FROM 'hunter2') IS NOT NULL",
            "SELECT id FROM users WHERE substring(password FROM '…') IS NOT NULL",
        ),
        (
            "DO $$ DECLARE p text := 'hunter2'; BEGIN PERFORM 1 FROM u WHERE p = password; END $$",
            "DO $$ DECLARE p text := '…'; BEGIN PERFORM … FROM u WHERE p = password; END $$",
        ),
        ("SELECT $$mypassword$$ = password", "SELECT '…' = password"),
        // A body that names a password: the text's other literals may reach it.
        (
            "CREATE FUNCTION chk(p text) RETURNS bool LANGUAGE sql AS $$ SELECT p = password FROM u $$; SELECT chk('hunter2')",
            "CREATE FUNCTION chk(p text) RETURNS bool LANGUAGE sql AS $$ SELECT p = password FROM u $$; SELECT chk('…')",
        ),
        (
            "SELECT $$hunter2$$U&\"p\\0061ssword\"",
            "SELECT '…'U&\"p\\0061ssword\"",
        ),
        (
            "SELECT 1 FROM u WHERE password IS NULL OR x = 1$a$hunter2$a$",
            "SELECT … FROM u WHERE password IS NULL OR x = …'…'",
        ),
        (
            "SELECT 1 FROM users WHERE 'hunter2' = U&\"p\\0061ssword\" AND id = 1",
            "SELECT … FROM users WHERE …",
        ),
        (
            "SELECT 'other'; SELECT 1 FROM u WHERE password IS NULL",
            "SELECT '…'; SELECT … FROM u WHERE password IS NULL",
        ),
        (
            "DO $a$ BEGIN PERFORM $b$pw$b$ = password; END $a$",
            "DO $a$ BEGIN PERFORM '…' = password; END $a$",
        ),
        (
            "select $t$hunter23$t$ AS password",
            "select '…' AS password",
        ),
        (
            "select 'topsecret4' = password from (select 'a' as password) s",
            "select …",
        ),
        (
            "DO $$ BEGIN EXECUTE 'ALTER ROLE a PASSWORD ''pw'''; END $$",
            "DO …",
        ),
        // Nothing that can hold a value follows: the end, a `;`, a bind parameter, `FROM`,
        // `IS [NOT] NULL`.
        (
            "UPDATE u SET password = $1 WHERE id = $2",
            "UPDATE u SET password = $1 WHERE id = $2",
        ),
        (
            "SELECT id, password FROM users WHERE email = $1",
            "SELECT id, password FROM users WHERE email = $1",
        ),
        (
            "SELECT id FROM users WHERE password IS NOT NULL AND note = 'n'",
            "SELECT id FROM users WHERE password IS NOT NULL AND note = '…'",
        ),
        (
            "ALTER ROLE a PASSWORD 'pw'; SELECT password",
            "ALTER ROLE a PASSWORD '…'; SELECT password",
        ),
        // A vertical tab is blank to PostgreSQL too.
        (
            "ALTER ROLE a PASSWORD\x0b'pw'",
            "ALTER ROLE a PASSWORD\x0b'…'",
        ),
        // Unclosed dollar quotes, however short, are read to the end without a fault.
        ("SELECT $$$", "SELECT $$$"),
        ("SELECT $a$a$", "SELECT $a$a$"),
        ("SELECT $€$€$", "SELECT $€$€$"),
        (
            "ALTER ROLE a PASSWORD 'pw'; SELECT $$$",
            "ALTER ROLE a PASSWORD '…'; SELECT '…'",
        ),
        // Comments before the literal, a national literal, a literal continued on the
        // next line.
        (
            "ALTER ROLE c PASSWORD /* new */ 'secret'",
            "ALTER ROLE c PASSWORD /* new */ '…'",
        ),
        // A dollar-quoted body is SQL too: a DO block, a function's body.
        (
            "DO $$ BEGIN CREATE ROLE app LOGIN PASSWORD 'secret'; END $$;",
            "DO $$ BEGIN CREATE ROLE app LOGIN PASSWORD '…'; END $$;",
        ),
        (
            "CREATE FUNCTION f() RETURNS void AS $fn$ ALTER ROLE a PASSWORD $q$pw$q$ $fn$ LANGUAGE sql",
            "CREATE FUNCTION f() RETURNS void AS $fn$ ALTER ROLE a PASSWORD '…' $fn$ LANGUAGE sql",
        ),
        (
            "SELECT $€$it's$€$; ALTER ROLE b PASSWORD 'x'",
            "SELECT '…'; ALTER ROLE b PASSWORD '…'",
        ),
        // A `--` comment ends at a CR too; a named argument is a `password =` as well.
        (
            "ALTER ROLE v PASSWORD --c\r'crC' LOGIN",
            "ALTER ROLE v PASSWORD --c\r'…' LOGIN",
        ),
        (
            "ALTER ROLE v --c\rPASSWORD 'x'",
            "ALTER ROLE v --c\rPASSWORD '…'",
        ),
        (
            "SELECT set_pw(username => 'bob', password => 'p1', new_password := 'p2')",
            "SELECT set_pw(username => '…', password => '…', new_password := '…')",
        ),
        // A word inside a literal, a comment or a quoted name is no keyword.
        (
            "COMMENT ON ROLE app IS 'rotated password'; ALTER ROLE app PASSWORD 'apppw'",
            "COMMENT ON ROLE app IS …",
        ),
        ("SELECT 'password = ''x'''", "SELECT …"),
        (
            "SELECT 1 /* password */; ALTER ROLE b PASSWORD 'pw' -- password\n",
            "SELECT … /* password */; ALTER ROLE b PASSWORD '…' -- password\n",
        ),
        (
            "UPDATE t SET \"User Password\" = 'pw', user_password = E'p\\'w', note = 'n'",
            "UPDATE t SET \"User Password\" = '…', user_password = E'…', note = '…'",
        ),
        (
            "ALTER ROLE c PASSWORD /* a /* nested */ b */ 'secret'",
            "ALTER ROLE c PASSWORD /* a /* nested */ b */ '…'",
        ),
        // PostgreSQL reads a block comment never closed to the end of the text, and refuses
        // it: the record is cut.
        (
            "ALTER ROLE c PASSWORD /* open /* never closed */ 'secret'",
            "ALTER ROLE c PASSWORD…",
        ),
        (
            "SELECT 'a' /* open; ALTER ROLE c PASSWORD 'secret'",
            "SELECT …",
        ),
        (
            "ALTER ROLE d PASSWORD -- new\n 'secret'",
            "ALTER ROLE d PASSWORD -- new\n '…'",
        ),
        (
            "ALTER ROLE n PASSWORD N'secret'",
            "ALTER ROLE n PASSWORD N'…'",
        ),
        (
            "ALTER ROLE k PASSWORD 'sec'\n  'ret' LOGIN",
            "ALTER ROLE k PASSWORD '…' LOGIN",
        ),
        // A connection string read as SQL inside a dollar quote: after `password=` only a
        // value, a bind parameter or NULL may come, never a comment or nothing.
        ("SELECT $$host=h password=--hunter2q$$::text", "SELECT …"),
        ("SELECT $$host=h password=/*hunter2q*/$$::text", "SELECT …"),
        ("SELECT $$host=h password=;hunter2q$$::text", "SELECT …"),
        ("SELECT $$host=h password=$1hunter2q$$::text", "SELECT …"),
        ("SELECT $$host=h password=null-hunter2q$$::text", "SELECT …"),
        // A connection string in a dollar quote: each `password` in it must be a name with its
        // literal masked (not in what SQL reads as a comment or a quoted name, nor with no
        // value), and a URL with a password in a literal is cut as a `password` in one is.
        (
            "SELECT $$user=v application_name=-- password=ciDash1$$",
            "SELECT …",
        ),
        ("SELECT $$a=/* password=ciBlk2 a=*/$$", "SELECT …"),
        ("SELECT $$a=\" password=ciQuo3 b=\"$$", "SELECT …"),
        ("SELECT $$password=$1,ciPar4$$", "SELECT …"),
        ("SELECT $$password=null)ciNul5$$", "SELECT …"),
        (
            "SELECT dblink('postgresql://v:heldD4@h/db', 'q')",
            "SELECT dblink(…",
        ),
        (
            "DO $$ BEGIN EXECUTE $q$ALTER ROLE x PASSWORD 'pw'$q$; END $$",
            "DO $$ BEGIN EXECUTE $q$ALTER ROLE x PASSWORD '…'$q$; END $$",
        ),
        // PostgreSQL keeps a name's first 63 bytes: one that ends in `password` there is one.
        (
            "SET app.aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaapasswordzz = 'truncSecret1'",
            "SET app.aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaapasswordzz = '…'",
        ),
        // A quoted name is cut at 63 bytes of its text, without its quotes.
        (
            "SET app.\"AAAAaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaapasswordxyz\" = 'hunter2'",
            "SET app.\"AAAAaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaapasswordxyz\" = '…'",
        ),
        // A name spelled with escapes accounts for no `password` written in a body.
        (
            "SELECT f($$a=U&\"p\\0061ssword\"-- password=S3CRETpw$$)",
            "SELECT f(…",
        ),
        // SQL, JSON or a libpq value inside a literal may spell one with escapes of its own,
        // and a URL's user information runs to its last `@` before the first `/`; its query's
        // keys may be percent-encoded.
        (
            "DO E'BEGIN UPDATE users SET U&\"p\\\\0061ssword\" = ''hunter10''; END'",
            "DO E…",
        ),
        (
            "SELECT * FROM json_populate_record(NULL::u2, $${\"p\\u0061ssword\":\"hunter5\"}$$)",
            "SELECT * FROM json_populate_record(NULL::u2, …",
        ),
        (
            "SELECT c('c1', 'postgresql://t:Sx1?q@/postgres?host=/tmp')",
            "SELECT c(…",
        ),
        (
            "SELECT c('c2', 'postgresql:///db?user=t2&pass%77ord=S3CRETpw')",
            "SELECT c(…",
        ),
        (
            "SELECT c('c7', E'user=p options=''-c app.pass\\\\word=S3CRETopt''')",
            "SELECT c(…",
        ),
        // A number may be a password too.
        (
            "WITH s(p) AS (VALUES (987654)) UPDATE users SET password = s.p FROM s",
            "WITH s(p) AS (VALUES (…)) UPDATE users SET password…",
        ),
        ("SELECT 987654 AS password", "SELECT … AS password"),
        ("ALTER ROLE p PASSWORD $1", "ALTER ROLE p PASSWORD $1"),
        // A literal continued past a comment never closed, spelling the name across it.
        (
            "DO $$ BEGIN EXECUTE 'ALTER ROLE x PASS'\n/* /* */'WORD ''secret'''; END $$",
            "DO …",
        ),
        (
            "UPDATE u SET password = $1, pw_set = NULL WHERE id = $2",
            "UPDATE u SET password = $1, pw_set = NULL WHERE id = $2",
        ),
        // `passwd` (PostgreSQL's `pg_shadow.passwd`, and columns named after it) and
        // pgcrypto's functions, which take passwords and keys.
        (
            "SELECT usename, passwd FROM pg_shadow WHERE usename = 'ada'",
            "SELECT usename, passwd FROM pg_shadow WHERE usename = '…'",
        ),
        // Only calls of such functions count: a column `encrypted`, the `ENCRYPTED` of
        // `ENCRYPTED PASSWORD` and a setting's name are read as before.
        (
            "ALTER ROLE ada WITH ENCRYPTED PASSWORD 'x'",
            "ALTER ROLE ada WITH ENCRYPTED PASSWORD '…'",
        ),
        (
            "SELECT * FROM files WHERE encrypted = true AND id = 5",
            "SELECT * FROM files WHERE encrypted = true AND id = 5",
        ),
        (
            "SET password_encryption = 'scram-sha-256'",
            "SET password_encryption = 'scram-sha-256'",
        ),
        (
            "SELECT hmac('payload', 'hmac-secret', 'sha256')",
            "SELECT hmac('…', '…', '…')",
        ),
        (
            "UPDATE u SET h = encode(digest('hunter2' || salt, 'sha256'), 'hex')",
            "UPDATE u SET h = encode(digest('…' || salt, '…'), '…')",
        ),
        (
            "UPDATE u SET pw = md5('hunter2' || 'ada') WHERE id = 3",
            "UPDATE u SET pw = md5('…' || '…') WHERE id = …",
        ),
        (
            "SELECT pgp_key_id(dearmor('-----BEGIN PGP PRIVATE KEY BLOCK-----'))",
            "SELECT pgp_key_id(dearmor('…'))",
        ),
        (
            "SELECT \"crypt\"('hunter2', pw) FROM u",
            "SELECT \"crypt\"('…', pw) FROM u",
        ),
        (
            "DO $$ BEGIN PERFORM crypt('hunter2', gen_salt('bf')); END $$",
            "DO $$ BEGIN PERFORM crypt('…', gen_salt('…')); END $$",
        ),
        (
            "UPDATE accounts SET passwd = 'hunter2' WHERE id = 7",
            "UPDATE accounts SET passwd = '…' WHERE id = …",
        ),
        (
            "SELECT 1 FROM u WHERE user_passwd = 'hunter2'",
            "SELECT … FROM u WHERE user_passwd = '…'",
        ),
        (
            "INSERT INTO users (name, pw) VALUES ('ada', crypt('hunter2', gen_salt('bf')))",
            "INSERT INTO users (name, pw) VALUES ('…', crypt('…', gen_salt('…')))",
        ),
        (
            "SELECT id FROM users WHERE pw = crypt('hunter2', pw)",
            "SELECT id FROM users WHERE pw = crypt('…', pw)",
        ),
        (
            "SELECT pgp_sym_decrypt(data, 'key material') FROM t",
            "SELECT pgp_sym_decrypt(data, '…') FROM t",
        ),
        (
            "SELECT encrypt(data, 'k3y', 'aes') FROM t",
            "SELECT encrypt(data, '…', '…') FROM t",
        ),
        (
            "SELECT id FROM users WHERE pw = public.crypt ('hunter2' || 'x', pw)",
            "SELECT id FROM users WHERE pw = public.crypt ('…' || '…', pw)",
        ),
        (
            "SELECT dblink_connect('host=db user=u passwd=hunter2')",
            "SELECT dblink_connect(…",
        ),
    ] {
        let got = super::audited(statement, false, false);
        if got != audited {
            wrong.push(format!(
                "{statement:?}\n  gives {got:?}\n  not   {audited:?}"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn dollar_quotes_nested_too_deep_are_cut() {
    let nested: String = (0..40).map(|n| format!("$t{n}$")).collect();
    let text = format!("SELECT {nested} 'pw' = password");
    assert_eq!(super::audited(&text, false, false), "SELECT …");
}

/// Texts of the longest length a record keeps, made so that a reading that goes back over
/// what it has read would take seconds: comments nested and never closed, quotes that each
/// open a comment. They are masked like any other.
#[test]
fn texts_made_to_be_read_slowly_are_masked() {
    let fill = |piece: &str| piece.repeat(MAX_STATEMENT / piece.len() - 8);
    let wrong: Vec<String> = [
        (
            format!(
                "SELECT 1 {}ALTER ROLE x PASSWORD 'secret'",
                fill("/* /* */ ")
            ),
            "SELECT … /* /* */ ",
            "PASSWORD…",
        ),
        (
            format!("SELECT password IN ({}'secret')", fill("'--'--")),
            "SELECT password…",
            "SELECT password…",
        ),
        (
            format!("SELECT password IN ({}'secret')", fill("'/*'/*")),
            "SELECT password…",
            "SELECT password…",
        ),
        (
            format!("SELECT {}\n password = 'secret'", fill("'/*' ")),
            "SELECT '…' ",
            "password = '…'",
        ),
    ]
    .into_iter()
    .filter_map(|(text, starts, ends)| {
        let got = super::audited(&text, false, false);
        (!got.starts_with(starts) || !got.ends_with(ends) || got.contains("secret")).then(|| {
            let tail: Vec<char> = got.chars().rev().take(60).collect();
            let tail: String = tail.into_iter().rev().collect();
            format!("{}…\n  gives …{tail}", &text[..40])
        })
    })
    .collect();
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn a_statement_cut_at_the_size_limit_keeps_no_literal_of_its_last_part() {
    // The name that would have masked it lies past the cut.
    let text = "SELECT 'a'; SELECT 1 FROM users WHERE 'hunter2' = pass";
    assert_eq!(
        super::audited(text, false, true),
        "SELECT '…'; SELECT … FROM users WHERE '…' = pass"
    );
    assert_eq!(
        super::audited(text, true, true),
        "SELECT …",
        "strict: cut before the first literal"
    );
}

/// A session masked strictly (one that named `client_encoding`, say) cuts calls of functions
/// that take secrets too, quoted names included, as code generators write them.
#[test]
fn secret_calls_are_cut_in_strict_sessions_too() {
    for (statement, secret) in [
        (
            "SELECT encode(\"digest\"('Zk101natural','sha256'),'hex')",
            "Zk101",
        ),
        (
            "SELECT \"public\".\"crypt\"('Zk102', \"public\".\"gen_salt\"('bf'))",
            "Zk102",
        ),
        (
            "SELECT \"crypt\"('Zk70secret', gen_salt('bf')) AS names",
            "Zk70",
        ),
        ("SELECT \"pgp_sym_encrypt\"('data','Zk71key')", "Zk71"),
        ("SELECT \"hmac\" ('data','Zk95hmackey','sha256')", "Zk95"),
        ("SELECT md5('Zk96') FROM t", "Zk96"),
    ] {
        for strict in [true, false] {
            let got = super::audited(statement, strict, false);
            assert!(
                !got.contains(secret),
                "strict {strict}: {statement:?} gives {got:?}"
            );
        }
    }
}
