/**
 * Everything of the RabbitMQ layer that needs amqplib at run time, in one module that
 * `loadRabbitMqLayer` imports with `import()` when the CLI first needs it. Import it only that way
 * (a type-only import is fine): a static import would load amqplib with the importing module.
 */
export { openRabbitMqAdmin } from './rabbitmq-admin.js';
