export { consoleLogger, silentLogger, type LogFields, type Logger } from './logger.js';
export { runObserved } from './run-observed.js';
