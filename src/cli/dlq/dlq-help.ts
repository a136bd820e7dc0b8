import { GLOBAL_HELP, selectorHelp } from '../cli-context.js';

/** Help of `harrier dlq`: its commands. */
export const DLQ_HELP = `Usage: harrier dlq <command> [options]

Inspect, replay and clean up the dead letters in the system's dead-letter store.

Commands:
  list               list dead letters, filtered and paged
  show <id>          one dead letter: envelope, error and stack, attempts, replays
  groups             counts by failure fingerprint, with a sample id
  replay <id...>     send dead letters back to the subscription they died in (also --all or filters)
  purge              delete dead letters (ids, --all or filters; asks, or needs --yes)
  export             write dead letters as JSON lines (stdout or --out)
  import             add dead letters from JSON lines (stdin or --in)

Run \`harrier dlq <command> --help\` for its options.

${GLOBAL_HELP}
`;

/** Help of `harrier dlq list`. */
export const LIST_HELP = `Usage: harrier dlq list [filters] [--limit N] [--cursor C] [--json]

Lists dead letters in first-failure order, one page at a time. A table on a terminal, JSON lines
otherwise; in JSON mode a last line {"next":"<cursor>"} follows when there is another page.

  --limit <n>         records per page (default 50)
  --cursor <cursor>   continue after the page that printed this cursor

${selectorHelp('dead')}

${GLOBAL_HELP}
`;

/** Help of `harrier dlq show`. */
export const SHOW_HELP = `Usage: harrier dlq show <id> [--json]

Shows one dead letter: the envelope pretty-printed, the last error with its stack, the attempt
history and the replay history. Exits 4 when no dead letter has that id.

${GLOBAL_HELP}
`;

/** Help of `harrier dlq groups`. */
export const GROUPS_HELP = `Usage: harrier dlq groups [filters] [--json]

Counts dead letters by failure fingerprint (error name + first application stack frame), largest
group first, with a sample id to \`show\`. Replay or purge a group with --fingerprint <fp>.

${selectorHelp('dead')}

${GLOBAL_HELP}
`;

/** Help of `harrier dlq replay`. */
export const REPLAY_HELP = `Usage: harrier dlq replay (<id...> | --all | [filters]) [options]

Sends each selected dead letter back to the subscription it died in, through the broker (never
handled here): same message id, attempts reset, a replay entry recorded. Each id succeeds or fails
on its own; the exit code is 1 when any failed. Never prompts.

  --all               every dead letter matching --status (default dead)
  --dry-run           check every record and print what would be replayed; change nothing
  --rate <n>          at most n replays per second (token bucket; default unlimited)
  --concurrency <n>   replays in flight at once (default 16); one partition key stays in order
  --by <name>         recorded as who replayed (default cli:$USER, or cli)
  --signing-keys <k>  comma-separated hex keys (default $HARRIER_SIGNING_KEYS): refuse, with
                      signature-invalid, every record whose envelope no longer verifies

${selectorHelp('dead')}

${GLOBAL_HELP}
`;

/** Help of `harrier dlq purge`. */
export const PURGE_HELP = `Usage: harrier dlq purge (<id...> | --all | [filters]) [--yes]

Deletes the selected dead letters. Asks for confirmation on a terminal; without one (a script, a
pipe) --yes is required, else it exits 2. Exits 4 when nothing matches.

  --all               every dead letter matching --status (default any)
  -y, --yes           do not ask

${selectorHelp('any')}

${GLOBAL_HELP}
`;

/** Help of `harrier dlq export`. */
export const EXPORT_HELP = `Usage: harrier dlq export [<id...> | --all | filters] [--out FILE]

Writes the selected dead letters as JSON lines, one complete record each (the format
\`harrier dlq import\` reads). Without a selector, exports every record. Exits 4 when nothing matches.

  --all               every dead letter matching --status (default any)
  --out <file>        write to this file instead of stdout

${selectorHelp('any')}

${GLOBAL_HELP}
`;

/** Help of `harrier dlq import`. */
export const IMPORT_HELP = `Usage: harrier dlq import [--in FILE]

Adds each JSON line (a record as written by \`harrier dlq export\`) to the store; a record whose id
exists is updated. Invalid lines are reported with their line number and skipped; the exit code is 1
when there were any.

  --in <file>         read this file instead of stdin

${GLOBAL_HELP}
`;
