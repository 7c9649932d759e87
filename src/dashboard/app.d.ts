// app.js is embedded as text (`with { type: 'text' }`) and served to the browser.
declare const text: string
export default text
