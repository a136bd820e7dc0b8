import { Logger as NestLogger } from '@nestjs/common';
import type { LogFields, Logger } from '../logging/logger.js';

/** `message`, then `fields` as JSON when there are any (a field that cannot be written says so). */
function lineOf(message: string, fields: LogFields | undefined): string {
  if (fields === undefined || Object.keys(fields).length === 0) return message;
  try {
    return `${message} ${JSON.stringify(fields)}`;
  } catch {
    return `${message} (fields not serialisable: ${Object.keys(fields).join(', ')})`;
  }
}

/**
 * A Harrier {@link Logger} that writes through Nest's `Logger`, so the bus's warnings and errors
 * appear with the application's other logs, at Nest's log levels, and follow `app.useLogger()`.
 *
 * @remarks
 * The default `logger` of `HarrierModule`. Harrier's `info` is Nest's `log`; structured fields
 * follow the message as JSON.
 * @param context - the context Nest prints beside each line.
 * @defaultValue context `'Harrier'`
 */
export function nestLogger(context = 'Harrier'): Logger {
  const logger = new NestLogger(context);
  return {
    debug: (message, fields) => {
      logger.debug(lineOf(message, fields));
    },
    info: (message, fields) => {
      logger.log(lineOf(message, fields));
    },
    warn: (message, fields) => {
      logger.warn(lineOf(message, fields));
    },
    error: (message, fields) => {
      logger.error(lineOf(message, fields));
    },
  };
}
