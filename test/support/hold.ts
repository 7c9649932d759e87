/**
 * Fault injection on a real PostgreSQL: a trigger that holds the rows a statement writes for a
 * moment before its transaction can commit (locked, not yet seen by others), so that another write
 * reads them meanwhile — the interleaving of two instances, made on purpose.
 */
type SQL = InstanceType<typeof Bun.SQL>

/** Rows of `on` (e.g. `BEFORE UPDATE ON campaigns`) for which `when` holds wait `seconds` (trigger and function named `name`). */
export async function holdRows(db: SQL, name: string, on: string, when: string, seconds = 0.5) {
  await db.unsafe(`CREATE FUNCTION ${name}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(${seconds}); RETURN NEW; END $$`)
  await db.unsafe(`CREATE TRIGGER ${name} ${on} FOR EACH ROW WHEN (${when}) EXECUTE FUNCTION ${name}()`)
}
