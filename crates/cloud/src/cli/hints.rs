//! What a refusal of the command line adds for the operator: the environment variable behind
//! an option they never typed, an empty variable, and an option typed before its subcommand.

use super::Cli;

/// An environment variable of the command run that is set but empty (`CLOUD_DATABASE_URL=`
/// from a compose file whose own variable was unset) and not overridden on the command line:
/// a usage error naming it. Taken as unset it could quietly choose another store or identity
/// (SQLite in `./data`, the self-signed certificate); taken as a value it reads as `no org ""`.
pub(super) fn blank_env() -> Option<String> {
    let (chain, _) = typed_commands();
    chain.iter().rev().find_map(|command| {
        command.get_arguments().find_map(|a| {
            let var = a.get_env()?;
            let blank = std::env::var_os(var).is_some_and(|v| v.is_empty());
            let long = a.get_long()?;
            (blank && env_behind(&format!("--{long}")).is_some()).then(|| {
                format!(
                    "the environment variable {} (--{long}) is set but empty: give it a value, or unset it",
                    var.to_string_lossy()
                )
            })
        })
    })
}

/// The subcommand typed (`cloud api-key list`), for a refusal found outside clap's parse to
/// show its usage line rather than `cloud`'s own.
pub(super) fn typed_command() -> clap::Command {
    let (mut chain, _) = typed_commands();
    chain
        .pop()
        .unwrap_or_else(<Cli as clap::CommandFactory>::command)
}

/// The commands typed, from `cloud` down to the subcommand run (`cloud org create`: three),
/// with the subcommands' names.
/// The root is built first, so that each subcommand knows its whole name (`cloud org create`)
/// for a usage line.
fn typed_commands() -> (Vec<clap::Command>, Vec<String>) {
    let mut root = <Cli as clap::CommandFactory>::command();
    root.build();
    let mut chain = vec![root];
    let mut path = Vec::new();
    let mut args = std::env::args_os().skip(1);
    while let Some(typed) = args.next() {
        // An option's value is no subcommand, even when it reads as one.
        let text = typed.to_string_lossy();
        if let Some(option) = text.strip_prefix("--").filter(|o| !o.contains('=')) {
            let mut commands = vec![<Cli as clap::CommandFactory>::command()];
            let mut takes_value = false;
            while let Some(c) = commands.pop() {
                takes_value |= c
                    .get_arguments()
                    .any(|a| a.get_long() == Some(option) && a.get_action().takes_values());
                commands.extend(c.get_subcommands().cloned());
            }
            if takes_value {
                args.next();
            }
            continue;
        }
        // clap's own `help` (there once the root is built) leads to option-less copies.
        let Some(sub) = chain
            .last()
            .and_then(|c| c.find_subcommand(&typed))
            .filter(|c| c.get_name() != "help")
            .cloned()
        else {
            continue;
        };
        path.push(sub.get_name().to_string());
        chain.push(sub);
    }
    (chain, path)
}

/// A hint for an option typed before the subcommand it belongs to (`cloud --data-dir D org
/// create acme`): clap tips only one level down, and admin commands are two.
pub(super) fn misplaced(arg: &str) -> Option<String> {
    let long = arg.split(['=', ' ']).next()?.strip_prefix("--")?;
    let (chain, path) = typed_commands();
    let command = chain.last()?;
    let belongs = command.get_arguments().any(|a| a.get_long() == Some(long));
    (belongs && !path.is_empty()).then(|| {
        format!(
            "(--{long} is an option of `cloud {0}`: write it after `{0}`)",
            path.join(" ")
        )
    })
}

/// The environment variable that set the option `arg` (`--log-level <LOG_LEVEL>`), when it is
/// set and the option is not on the command line.
pub(super) fn env_behind(arg: &str) -> Option<String> {
    let long = arg.split([' ', '=']).next()?.strip_prefix("--")?;
    let typed = std::env::args_os().any(|a| {
        let a = a.to_string_lossy();
        a == format!("--{long}") || a.starts_with(&format!("--{long}="))
    });
    if typed {
        return None;
    }
    // The option of the subcommand typed, or of a command above it (`--log-level`).
    let (chain, _) = typed_commands();
    let found = chain.iter().rev().find_map(|c| {
        c.get_arguments()
            .find(|a| a.get_long() == Some(long))
            .cloned()
    })?;
    let var = found.get_env()?.to_string_lossy().into_owned();
    std::env::var_os(&var).is_some().then_some(var)
}

/// For a refusal found after parsing (`--http-listen "x" is not an address`, `unsupported
/// --database-url`), a line for each option it names whose value came from its environment
/// variable: the message names only the option, which the operator may never have typed.
pub fn env_notes(message: &str) -> Vec<String> {
    let mut notes = Vec::new();
    let mut seen = Vec::new();
    for (at, _) in message.match_indices("--") {
        let name: String = message[at + 2..]
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-')
            .collect();
        if name.is_empty() || seen.contains(&name) {
            continue;
        }
        seen.push(name.clone());
        if let Some(var) = env_behind(&format!("--{name}")).filter(|v| !message.contains(v)) {
            notes.push(format!(
                "(the value of --{name} comes from the environment variable {var})"
            ));
        }
    }
    notes
}
