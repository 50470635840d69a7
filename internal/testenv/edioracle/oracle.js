// oracle.js is the independent EDI implementation the Go tests compare
// internal/edi with: node-x12 (X12 parse and build) and edifact (EDIFACT
// tokenizer and reader), both from the npm registry. It reads one JSON
// request on stdin: {"op": "x12-parse"|"x12-build"|"edifact-parse", ...}
// and writes one JSON answer on stdout.
'use strict'
const { X12Parser, X12Interchange } = require('node-x12')
const EdifactReader = require('edifact/reader.js')

function party (qualifier, id) { return { qualifier: (qualifier || '').trim(), id: (id || '').trim() } }

function x12Parse (req) {
  const parsed = new X12Parser(true).parse(req.document)
  const list = parsed.interchanges || [parsed]
  return list.map(ic => {
    const h = ic.header.elements.map(e => e.value)
    return {
      sender: party(h[4], h[5]),
      receiver: party(h[6], h[7]),
      control: h[12].trim(),
      date: h[8],
      time: h[9],
      version: h[11],
      test: h[14] === 'T',
      ackRequested: h[13] === '1',
      declared: parseInt(ic.trailer.elements[0].value, 10),
      groups: ic.functionalGroups.map(g => {
        const gh = g.header.elements.map(e => e.value)
        return {
          fid: gh[0],
          sender: party('', gh[1]),
          receiver: party('', gh[2]),
          control: gh[5],
          version: gh[7],
          declared: parseInt(g.trailer.elements[0].value, 10),
          sets: g.transactions.map(t => {
            const th = t.header.elements.map(e => e.value)
            return {
              type: th[0],
              control: th[1],
              version: th[2] || '',
              segments: t.segments.length + 2,
              declared: parseInt(t.trailer.elements[0].value, 10),
              body: t.segments.map(s => [s.tag].concat(s.elements.map(e => e.value)))
            }
          })
        }
      })
    }
  })
}

// x12Segments lists the segments node-x12 reads, with the delimiters it
// detects from the ISA (its object model has no place for a TA1, which
// stands between ISA and GS).
function x12Segments (req) {
  const p = new X12Parser(false)
  p._detectOptions(req.document)
  return p._parseSegments(req.document, p._options.segmentTerminator, p._options.elementDelimiter)
    .map(s => [s.tag].concat(s.elements.map(e => e.value)))
}

function x12Build (req) {
  const o = req.options
  const ic = new X12Interchange(o)
  ic.setHeader(req.isa)
  for (const g of req.groups) {
    const group = ic.addFunctionalGroup()
    group.setHeader(g.gs)
    for (const s of g.sets) {
      const tx = group.addTransaction()
      tx.setHeader(s.st)
      for (const seg of s.segments) tx.addSegment(seg[0], seg.slice(1))
    }
  }
  return ic.toString(o)
}

function comps (el) { return el || [] }

function edifactParse (req) {
  // The reader knows the UNO* character sets only; other syntax
  // identifiers (IATB) are read with its default one, and so is a
  // document whose UNA changes the service characters: switching the
  // character set loses them (it then refuses the first byte). It knows
  // no repetition separator (syntax 4, UNA position 7): that position is
  // given to it as the space of syntax 3, which reads the same values as
  // long as none holds the separator.
  let doc = req.document
  const una = /^(\s*UNA.{4})(.)/s.exec(doc)
  if (una && una[2] !== ' ') doc = una[1] + ' ' + doc.slice(una[0].length)
  const auto = /UNB.UNO[A-Z]/.test(doc) && !/^\s*UNA(?!:\+\.\? ')/.test(doc)
  const segs = new EdifactReader({ autoDetectEncoding: auto }).parse(doc)
  const out = []
  let ic = null; let g = null; let set = null
  const val = (seg, i, c) => (comps(seg.elements[i])[c] || '')
  const ver = (el) => comps(el).join(':').replace(/:+$/, '')
  for (const seg of segs) {
    switch (seg.name) {
      case 'UNB':
        ic = {
          sender: party(val(seg, 1, 1), val(seg, 1, 0)),
          receiver: party(val(seg, 2, 1), val(seg, 2, 0)),
          control: val(seg, 4, 0),
          date: val(seg, 3, 0),
          time: val(seg, 3, 1),
          version: ver(seg.elements[0]),
          test: val(seg, 10, 0) === '1',
          ackRequested: val(seg, 8, 0) === '1',
          groups: []
        }
        out.push(ic); g = null
        break
      case 'UNZ': ic.declared = parseInt(val(seg, 0, 0), 10); ic = null; break
      case 'UNG':
        g = { fid: val(seg, 0, 0), sender: party(val(seg, 1, 1), val(seg, 1, 0)), receiver: party(val(seg, 2, 1), val(seg, 2, 0)), control: val(seg, 4, 0), version: ver(seg.elements[6]), sets: [] }
        ic.groups.push(g)
        break
      case 'UNE': g.declared = parseInt(val(seg, 0, 0), 10); g = null; break
      case 'UNH':
        if (!g) { g = { implicit: true, sets: [] }; ic.groups.push(g) }
        set = { type: val(seg, 1, 0), control: val(seg, 0, 0), version: ver(comps(seg.elements[1]).slice(1)), segments: 1, body: [] }
        g.sets.push(set)
        break
      case 'UNT': set.segments++; set.declared = parseInt(val(seg, 0, 0), 10); set = null; break
      default:
        if (set) { set.segments++; set.body.push([seg.name].concat(seg.elements.map(e => e.join(':')))) }
    }
  }
  return out
}

let input = ''
process.stdin.setEncoding('utf8')
process.stdin.on('data', d => { input += d })
process.stdin.on('end', () => {
  const req = JSON.parse(input)
  const ops = { 'x12-parse': x12Parse, 'x12-build': x12Build, 'x12-segments': x12Segments, 'edifact-parse': edifactParse }
  process.stdout.write(JSON.stringify(ops[req.op](req)))
})
