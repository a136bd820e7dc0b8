import { Module } from '@nestjs/common';
import { HarrierModule } from '../../src/nestjs/index.js';
import {
  Confirmation,
  ConfirmOrder,
  GetOrderHandler,
  OrderBook,
  PlaceOrderHandler,
  PriceList,
} from './handlers.js';
import { OrdersController } from './orders.controller.js';

@Module({
  // The in-memory broker: one process. Give a BullMqBroker (harrier/redis) to spread the endpoint
  // over processes; nothing else changes.
  imports: [HarrierModule.forRoot({ endpoint: 'shop' })],
  controllers: [OrdersController],
  providers: [PriceList, OrderBook, Confirmation, PlaceOrderHandler, ConfirmOrder, GetOrderHandler],
})
export class AppModule {}
