/**
 * The NestJS example: a Nest HTTP application whose commands, events and queries go through
 * Harrier's bus (harrier/nestjs), on the in-memory broker.
 *
 * Run it with `npm run example:nestjs`. It starts the app on a free port, then plays a client:
 * - POST /orders twice: the controller sends PlaceOrder and answers 202 with the message id;
 * - PlaceOrderHandler (a Nest provider, with an injected PriceList) publishes OrderPlaced;
 * - ConfirmOrder, made afresh for the message by Nest with a request-scoped Confirmation that is given
 *   the message context, writes the order book;
 * - GET /orders/:id runs the GetOrder query until the order is there, and prints it;
 * - POST /orders with an empty item list is refused with 400 (the zod schema);
 * - app.close() stops the bus, letting in-flight handlers finish, as SIGTERM does with
 *   app.enableShutdownHooks().
 */
import 'reflect-metadata';
import { NestFactory } from '@nestjs/core';
import { AppModule } from './app.module.js';

const print = (line = ''): void => void process.stdout.write(`${line}\n`);

// Nest types its options as a class with only optional fields; its documented call is a literal.
// eslint-disable-next-line @typescript-eslint/no-unsafe-class-instance-assignment
const app = await NestFactory.create(AppModule, { logger: ['error', 'warn'] });
app.enableShutdownHooks();
await app.listen(0, '127.0.0.1');
const url = await app.getUrl();
print(`Harrier NestJS example: ${url}, endpoint "shop" on the in-memory broker`);

async function request(
  method: 'GET' | 'POST',
  path: string,
  body?: unknown,
): Promise<{ status: number; json: unknown }> {
  const response = await fetch(`${url}${path}`, {
    method,
    headers: { 'content-type': 'application/json' },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  return { status: response.status, json: await response.json() };
}

/** GET `path` until it answers 200 (the event handler runs after the command's handler). */
async function getWhenReady(path: string): Promise<unknown> {
  const deadline = Date.now() + 5_000;
  for (;;) {
    const { status, json } = await request('GET', path);
    if (status === 200) return json;
    if (Date.now() > deadline) throw new Error(`GET ${path} still answers ${status}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

try {
  for (const [orderId, items] of [
    ['o-1', ['book', 'lamp']],
    ['o-2', ['pen']],
  ] as const) {
    const placed = await request('POST', '/orders', { orderId, items });
    print(`POST /orders ${orderId} -> ${placed.status} ${JSON.stringify(placed.json)}`);
  }
  for (const orderId of ['o-1', 'o-2']) {
    print(`GET /orders/${orderId} -> ${JSON.stringify(await getWhenReady(`/orders/${orderId}`))}`);
  }
  const refused = await request('POST', '/orders', { orderId: 'o-3', items: [] });
  print(
    `POST /orders o-3 with no items -> ${refused.status} ${(refused.json as { message?: string }).message ?? ''}`,
  );
} finally {
  await app.close();
  print('Closed: the bus stopped after its in-flight handlers finished.');
}
