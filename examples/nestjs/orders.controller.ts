import {
  BadRequestException,
  Body,
  Controller,
  Get,
  HttpCode,
  HttpStatus,
  NotFoundException,
  Param,
  Post,
} from '@nestjs/common';
import { MessageValidationError, type MessageBus, type ResultOf } from '../../src/index.js';
import { InjectBus } from '../../src/nestjs/index.js';
import { GetOrder, PlaceOrder } from './messages.js';

@Controller('orders')
export class OrdersController {
  constructor(@InjectBus() private readonly bus: MessageBus) {}

  /** Sends PlaceOrder: accepted once the broker has it; handled, with retries, wherever it runs. */
  @Post()
  @HttpCode(HttpStatus.ACCEPTED)
  async place(@Body() body: unknown): Promise<{ messageId: string }> {
    try {
      return { messageId: await this.bus.send(PlaceOrder, body as { orderId: string; items: string[] }) };
    } catch (error) {
      if (error instanceof MessageValidationError) throw new BadRequestException(error.message);
      throw error;
    }
  }

  /** Runs GetOrder in this process and answers with its result. */
  @Get(':id')
  async get(@Param('id') orderId: string): Promise<NonNullable<ResultOf<typeof GetOrder>>> {
    const order = await this.bus.execute(GetOrder, { orderId });
    if (order === null) throw new NotFoundException(`no order ${orderId}`);
    return order;
  }
}
