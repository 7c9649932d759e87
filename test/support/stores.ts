/**
 * A module's store, for white-box tests and benchmarks that read or write rows below the
 * services (each service keeps its own store private: other modules go through the service).
 * Made over the same database as the services, once per Services.
 */
import { CampaignRepo } from '../../src/modules/campaigns/repo'
import { ContactRepo } from '../../src/modules/contacts/repo'
import { MessageRepo } from '../../src/modules/messages/repo'
import { WebhookRepo } from '../../src/modules/webhooks/repo'
import type { Services } from '../../src/services'

const made = new WeakMap<Services, ReturnType<typeof make>>()
const make = (svc: Services) => {
  const db = svc.deps.db
  return { campaigns: new CampaignRepo(db), contacts: new ContactRepo(db), messages: new MessageRepo(db), webhooks: new WebhookRepo(db) }
}

export function storesOf(svc: Services) {
  let s = made.get(svc)
  if (!s) made.set(svc, (s = make(svc)))
  return s
}
