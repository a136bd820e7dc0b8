export { consoleLogger, silentLogger, type LogFields, type Logger } from './logger.js';
