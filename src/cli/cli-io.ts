import type { Readable } from 'node:stream';

/** A stream the CLI writes to: `process.stdout`, `process.stderr`, or a test's capture. */
export interface CliOutput {
  write(text: string): unknown;
  /** True when a terminal is attached (tables, progress bars, prompts). */
  readonly isTTY?: boolean;
}

/** Where the CLI reads and writes; {@link run} defaults it to the process's own streams. */
export interface CliIo {
  /** @defaultValue process.stdout */
  readonly stdout: CliOutput;
  /** @defaultValue process.stderr */
  readonly stderr: CliOutput;
  /** @defaultValue process.stdin */
  readonly stdin: Readable & { readonly isTTY?: boolean };
  /** @defaultValue process.env */
  readonly env: Readonly<Record<string, string | undefined>>;
}

/** The CLI's exit codes. */
export const ExitCode = {
  ok: 0,
  someFailed: 1,
  usage: 2,
  /** The backend (Redis, PostgreSQL, ...) could not be reached. */
  unavailable: 3,
  /** @deprecated The same as {@link ExitCode.unavailable}: its name from when Redis was the only backend. */
  redisUnavailable: 3,
  nothingMatched: 4,
  /** `postgres migrate`: the schema holds a table of one of Harrier's names that Harrier did not create. */
  schemaConflict: 5,
} as const;

/** Ends a command with an exit code and a message for stderr. */
export class CliExit extends Error {
  readonly exitCode: number;

  constructor(exitCode: number, message: string) {
    super(message);
    this.name = 'CliExit';
    this.exitCode = exitCode;
  }
}

/** A usage error: exit code 2, the message names the fix. */
export function usageError(message: string): CliExit {
  return new CliExit(ExitCode.usage, message);
}

/** One subcommand of a command group (`list` of `harrier dlq list`): its arguments and the I/O. */
export type Subcommand = (argv: readonly string[], io: CliIo) => Promise<number>;

const HELP_WORDS = new Set(['--help', '-h', 'help']);

/**
 * Runs `harrier <group> <subcommand> ...`: the subcommand named first in `argv`, or the group's
 * help (exit 2 when no subcommand was given, 0 when help was asked for).
 * @throws CliExit (usage) for a subcommand the group does not have.
 */
export async function runSubcommand(
  group: string,
  help: string,
  subcommands: Readonly<Record<string, Subcommand>>,
  argv: readonly string[],
  io: CliIo,
): Promise<number> {
  const [sub, ...rest] = argv;
  if (sub === undefined || HELP_WORDS.has(sub)) {
    io.stdout.write(help);
    return sub === undefined ? ExitCode.usage : ExitCode.ok;
  }
  const run = Object.hasOwn(subcommands, sub) ? subcommands[sub] : undefined;
  if (run === undefined) {
    throw usageError(`Unknown command "${group} ${sub}": run \`harrier ${group} --help\` for the list`);
  }
  return run(rest, io);
}

/** A selector that matched nothing: exit code 4. */
export function nothingMatched(message: string): CliExit {
  return new CliExit(ExitCode.nothingMatched, message);
}

/**
 * Lets a command outlive the reader of `stream` (`harrier sagas list --json | head -1`): once the
 * pipe is closed, what is still written is dropped, and the command finishes and exits with its
 * own code, instead of dying on the unhandled `EPIPE` with a stack trace.
 *
 * @remarks
 * Finishing, rather than exiting at the first failed write, keeps a command that changes things
 * (`dlq replay --all | head`) from stopping half way; only its output is lost. Any other write
 * error stays fatal, as before.
 */
export function dropOutputWhenReaderGone(stream: NodeJS.WritableStream): void {
  stream.on('error', (error: NodeJS.ErrnoException) => {
    // Once the stream is destroyed by EPIPE, Node fails later writes with ERR_STREAM_DESTROYED.
    if (error.code === 'EPIPE' || error.code === 'ERR_STREAM_DESTROYED') return;
    throw error;
  });
}

/** Writes one JSON line. */
export function writeJson(out: CliOutput, value: unknown): void {
  out.write(`${JSON.stringify(value)}\n`);
}

/** Renders rows as an aligned text table under a header. */
export function formatTable(header: readonly string[], rows: readonly (readonly string[])[]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((row) => (row[i] ?? '').length)));
  const line = (cells: readonly string[]): string =>
    cells
      .map((cell, i) => (i === cells.length - 1 ? cell : cell.padEnd(widths[i] ?? 0)))
      .join('  ')
      .trimEnd();
  return `${[line(header), ...rows.map(line)].join('\n')}\n`;
}

/** Shortens text to `max` characters on one line, for table cells. */
export function clip(text: string, max: number): string {
  const flat = text.replace(/\s+/g, ' ');
  return flat.length <= max ? flat : `${flat.slice(0, max - 1)}…`;
}

/** An ms timestamp as ISO 8601. */
export function iso(ms: number): string {
  return new Date(ms).toISOString();
}
