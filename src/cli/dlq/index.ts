/** `harrier dlq …`: the dead-letter commands, and the signer option the dashboard command shares. */
export { dlqCommand } from './dlq-command.js';
export { signerOf } from './dlq-replay-command.js';
