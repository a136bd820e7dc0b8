/** Structured fields attached to a log line. */
export type LogFields = Readonly<Record<string, unknown>>;

/**
 * Where Harrier reports what it cannot throw: failed acks, handler errors, dead letters.
 *
 * @remarks
 * Shaped so pino, winston and console-style loggers adapt in one line.
 */
export interface Logger {
  debug(message: string, fields?: LogFields): void;
  info(message: string, fields?: LogFields): void;
  warn(message: string, fields?: LogFields): void;
  error(message: string, fields?: LogFields): void;
}

/** A logger that writes warnings and errors to stderr as one JSON line each, and drops the rest. */
export const consoleLogger: Logger = {
  debug: () => undefined,
  info: () => undefined,
  warn: (message, fields) => {
    process.stderr.write(`${JSON.stringify({ level: 'warn', message, ...fields })}\n`);
  },
  error: (message, fields) => {
    process.stderr.write(`${JSON.stringify({ level: 'error', message, ...fields })}\n`);
  },
};

/** A logger that drops everything. */
export const silentLogger: Logger = {
  debug: () => undefined,
  info: () => undefined,
  warn: () => undefined,
  error: () => undefined,
};
