import { consoleLogger, type LogFields, type Logger } from '../../src/logging/logger.js';

/**
 * A logger for code whose tests provoke some warnings on purpose: a warning `isExpected` accepts is
 * dropped; any other warning, and every error, goes to consoleLogger (stderr) as it would without
 * this logger, so a warning nobody expected stays in sight.
 */
export function expectingLogger(
  isExpected: (message: string, fields: LogFields | undefined) => boolean,
): Logger {
  return {
    debug: () => undefined,
    info: () => undefined,
    warn: (message, fields) => {
      if (!isExpected(message, fields)) consoleLogger.warn(message, fields);
    },
    error: (message, fields) => {
      consoleLogger.error(message, fields);
    },
  };
}
